package cluster

import (
	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// jobFromRecord converts a forwarded apply's result back into a Job, every
// field included (array ids, blob hashes and sizes), so a write through a
// follower answers exactly as one on the leader.
func jobFromRecord(r *raftpb.JobRecord) consensus.Job { return consensus.JobFromRecord(r) }
