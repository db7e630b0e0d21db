package api

import (
	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// JobToPB converts a replicated job into its API form.
func JobToPB(j *consensus.Job) *palyrav1.Job {
	out := &palyrav1.Job{
		Id: j.ID, Phase: palyrav1.JobPhase(j.Phase), Kind: j.Kind,
		Input: j.Input, TimeoutMs: j.TimeoutMS, Stdout: j.Stdout, Stderr: j.Stderr,
		ExitCode: j.ExitCode, Attempt: j.Attempt, NodeId: j.NodeID, Submitter: j.Submitter,
		SubmittedAtMs: j.SubmittedAtMS, StartedAtMs: j.StartedAtMS, FinishedAtMs: j.FinishedAtMS,
		FuelUsed: j.FuelUsed, CommitIndex: j.CommitIndex, MaxOutputBytes: j.MaxOutput,
		Priority: j.Priority, Constraints: j.Constraints, MaxRetries: j.MaxRetries, RetriesUsed: j.RetriesUsed,
		DeadlineAtMs: j.DeadlineAtMS, PendingReason: j.PendingReason, NotBeforeMs: j.NotBeforeMS,
		AllowHosts: j.AllowHosts, AllowPrivate: j.AllowPrivate, SecretNames: j.SecretNames, KvPrefix: j.KVPrefix,
	}
	if j.Kind == "wasm" {
		out.Wasm = &palyrav1.WasmSpec{ModuleSha256: j.ModuleHash, MemoryBytes: j.MemoryBytes, Fuel: j.Fuel}
	}
	for _, a := range j.Artifacts {
		out.Artifacts = append(out.Artifacts, &palyrav1.Artifact{Name: a.Name, MediaType: a.MediaType, Sha256: a.SHA256, Size: a.Size})
	}
	if j.Error != nil {
		out.Error = &palyrav1.Error{Code: j.Error.Code, Message: j.Error.Message, Hint: j.Error.Hint}
	}
	return out
}
