package api

import (
	"strings"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// JobToPB converts a replicated job into its API form. Payload sizes are
// always set; the payload bytes are whatever j holds (inline, or filled in
// from blobs by the caller).
func JobToPB(j *consensus.Job) *palyrav1.Job {
	out := &palyrav1.Job{
		Id: j.ID, Phase: palyrav1.JobPhase(j.Phase), Kind: j.Kind,
		Input: j.Input, TimeoutMs: j.TimeoutMS, Stdout: j.Stdout, Stderr: j.Stderr,
		ExitCode: j.ExitCode, Attempt: j.Attempt, NodeId: j.NodeID, Submitter: j.Submitter,
		SubmittedAtMs: j.SubmittedAtMS, StartedAtMs: j.StartedAtMS, PlacedAtMs: j.PlacedAtMS, FinishedAtMs: j.FinishedAtMS,
		FuelUsed: j.FuelUsed, CommitIndex: j.CommitIndex, MaxOutputBytes: j.MaxOutput,
		Priority: j.Priority, Constraints: j.Constraints, MaxRetries: j.MaxRetries, RetriesUsed: j.RetriesUsed,
		DeadlineAtMs: j.DeadlineAtMS, NotBeforeMs: j.NotBeforeMS,
		AllowHosts: j.AllowHosts, AllowPrivate: j.AllowPrivate, SecretNames: j.SecretNames, KvPrefix: j.KVPrefix,
		InputSha256: j.InputHash, StdoutSha256: j.StdoutHash, StderrSha256: j.StderrHash,
		InputSize:  payloadSize(j.InputSize, j.InputHash, j.Input),
		StdoutSize: payloadSize(j.StdoutSize, j.StdoutHash, j.Stdout),
		StderrSize: payloadSize(j.StderrSize, j.StderrHash, j.Stderr),
		ArrayId:    j.ArrayID, ArrayIndex: j.ArrayIndex, Deterministic: j.Deterministic,
		SkillId: j.SkillID, SkillTool: j.SkillTool, RequiresApproval: j.RequiresApproval,
		DecidedBy: j.DecidedBy, DecidedAtMs: j.DecidedAtMS, DecisionReason: j.DecisionReason,
		HookId: j.HookID, Annotations: j.Annotations,
		// The key as the submitter gave it: the record scopes it by the
		// submitter (two principals never share a key space).
		IdempotencyKey: strings.TrimPrefix(j.IdempotencyKey, j.Submitter+"/"),
	}
	if j.Phase == consensus.PhaseQueued {
		out.PendingReason = j.PendingReason // the record keeps the last one after the job moved on
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
	for _, a := range j.Earlier {
		out.EarlierAttempts = append(out.EarlierAttempts, &palyrav1.JobAttempt{Attempt: a.Attempt, NodeId: a.NodeID,
			PlacedAtMs: a.PlacedAtMS, EndedAtMs: a.EndedAtMS, Code: a.Code, Reason: a.Reason})
	}
	return out
}

// payloadSize is a payload's size: the recorded one, else (records from
// before sizes were kept) the inline bytes' length.
func payloadSize(recorded uint64, hash string, inline []byte) uint64 {
	if recorded > 0 || hash != "" {
		return recorded
	}
	return uint64(len(inline))
}

// ArrayToPB converts a job array into its API form, with a count for
// every phase (zeros included) so clients need no list of phases.
func ArrayToPB(a *consensus.Array) *palyrav1.JobArray {
	counts := make(map[string]uint64, len(consensus.AllPhases))
	for _, p := range consensus.AllPhases {
		counts[p.String()] = uint64(a.Count(p))
	}
	t := a.Template
	t.Phase = consensus.PhaseUnknown // the tasks have phases; the template has none
	return &palyrav1.JobArray{Id: t.ID, Size: a.Size, Counts: counts, Template: JobToPB(&t),
		Done: a.Terminal(), EndedAtMs: endedAt(a)}
}

func endedAt(a *consensus.Array) int64 {
	if a.Terminal() {
		return a.EndedAtMS
	}
	return 0
}
