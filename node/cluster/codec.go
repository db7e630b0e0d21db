package cluster

import (
	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// jobFromRecord converts a forwarded apply's result back into a Job. It
// mirrors consensus's unexported codec, which has no exported inverse of
// consensus.JobRecord yet.
func jobFromRecord(r *raftpb.JobRecord) consensus.Job {
	var je *consensus.JobError
	if e := r.GetError(); e != nil {
		je = &consensus.JobError{Code: e.Code, Message: e.Message, Hint: e.Hint}
	}
	return consensus.Job{
		ID: r.Id, Phase: consensus.Phase(r.Phase), Kind: r.Kind, ModuleHash: r.ModuleSha256,
		MemoryBytes: r.MemoryBytes, Fuel: r.Fuel, Input: r.Input, TimeoutMS: r.TimeoutMs,
		Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode, Error: je,
		FuelUsed: r.FuelUsed, Attempt: r.Attempt, NodeID: r.NodeId, Submitter: r.Submitter,
		SubmittedAtMS: r.SubmittedAtMs, StartedAtMS: r.StartedAtMs, FinishedAtMS: r.FinishedAtMs,
		CommitIndex: r.CommitIndex,
	}
}
