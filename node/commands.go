package node

import (
	"github.com/palyra-mesh/palyra/node/scheduler"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

func assignCmd(p scheduler.Placement, atMS int64) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_AssignJob{AssignJob: &raftpb.AssignJob{
		Id: p.JobID, Attempt: p.Attempt, NodeId: p.NodeID, AtMs: atMS}}}
}
