package consensus

import "github.com/palyra-mesh/palyra/proto/raftpb"

func jobErrorFromPB(e *raftpb.Error) *JobError {
	if e == nil {
		return nil
	}
	return &JobError{Code: e.Code, Message: e.Message, Hint: e.Hint}
}

func jobErrorToPB(e *JobError) *raftpb.Error {
	if e == nil {
		return nil
	}
	return &raftpb.Error{Code: e.Code, Message: e.Message, Hint: e.Hint}
}

func jobFromRecord(r *raftpb.JobRecord) Job {
	return Job{
		ID: r.Id, Phase: Phase(r.Phase), Kind: r.Kind, ModuleHash: r.ModuleSha256,
		MemoryBytes: r.MemoryBytes, Fuel: r.Fuel, Input: r.Input, TimeoutMS: r.TimeoutMs,
		Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode, Error: jobErrorFromPB(r.Error),
		FuelUsed: r.FuelUsed, Attempt: r.Attempt, NodeID: r.NodeId, Submitter: r.Submitter,
		SubmittedAtMS: r.SubmittedAtMs, StartedAtMS: r.StartedAtMs, PlacedAtMS: r.PlacedAtMs, FinishedAtMS: r.FinishedAtMs,
		CommitIndex: r.CommitIndex, MaxOutput: r.MaxOutputBytes,
		Priority: r.Priority, Constraints: copyMap(r.Constraints), MaxRetries: r.MaxRetries, RetriesUsed: r.RetriesUsed,
		NotBeforeMS: r.NotBeforeMs, DeadlineAtMS: r.DeadlineAtMs, IdempotencyKey: r.IdempotencyKey,
		PayloadHash: r.PayloadHash, PendingReason: r.PendingReason,
		Script: r.Script, AllowHosts: r.AllowHosts, AllowPrivate: r.AllowPrivate, Artifacts: artifactsFromPB(r.Artifacts), Deterministic: r.Deterministic,
		OutputSchema: r.OutputSchema, InputSchema: r.InputSchema, SkillID: r.SkillId, SkillTool: r.SkillTool,
		RequiresApproval: r.RequiresApproval, RunDeadlineAtMS: r.RunDeadlineAtMs, DecidedBy: r.DecidedBy, DecidedAtMS: r.DecidedAtMs, DecisionReason: r.DecisionReason,
		HookID: r.HookId, Annotations: r.Annotations,
		SecretNames: r.SecretNames, KVPrefix: r.KvPrefix, KVSeq: r.KvSeq, KVSeqRun: r.KvSeqRun,
		InputHash: r.InputSha256, InputSize: r.InputSize, StdoutHash: r.StdoutSha256, StdoutSize: r.StdoutSize,
		StderrHash: r.StderrSha256, StderrSize: r.StderrSize, ArrayID: r.ArrayId, ArrayIndex: r.ArrayIndex,
		Earlier: earlierFromPB(r.EarlierAttempts),
	}
}

func earlierFromPB(in []*raftpb.EarlierAttempt) []EarlierAttempt {
	if len(in) == 0 {
		return nil
	}
	out := make([]EarlierAttempt, len(in))
	for i, a := range in {
		out[i] = EarlierAttempt{Attempt: a.Attempt, NodeID: a.NodeId, PlacedAtMS: a.PlacedAtMs, EndedAtMS: a.EndedAtMs, Code: a.Code, Reason: a.Reason}
	}
	return out
}

func earlierToPB(in []EarlierAttempt) []*raftpb.EarlierAttempt {
	if len(in) == 0 {
		return nil
	}
	out := make([]*raftpb.EarlierAttempt, len(in))
	for i, a := range in {
		out[i] = &raftpb.EarlierAttempt{Attempt: a.Attempt, NodeId: a.NodeID, PlacedAtMs: a.PlacedAtMS, EndedAtMs: a.EndedAtMS, Code: a.Code, Reason: a.Reason}
	}
	return out
}

func artifactsFromPB(in []*raftpb.ArtifactRef) []Artifact {
	var out []Artifact
	for _, a := range in {
		out = append(out, Artifact{Name: a.Name, MediaType: a.MediaType, SHA256: a.Sha256, Size: a.Size})
	}
	return out
}

// ArtifactsPB converts artifacts to their log form.
func ArtifactsPB(in []Artifact) []*raftpb.ArtifactRef {
	var out []*raftpb.ArtifactRef
	for _, a := range in {
		out = append(out, &raftpb.ArtifactRef{Name: a.Name, MediaType: a.MediaType, Sha256: a.SHA256, Size: a.Size})
	}
	return out
}

func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func jobToRecord(j *Job) *raftpb.JobRecord {
	return &raftpb.JobRecord{
		Id: j.ID, Phase: uint32(j.Phase), Kind: j.Kind, ModuleSha256: j.ModuleHash,
		MemoryBytes: j.MemoryBytes, Fuel: j.Fuel, Input: j.Input, TimeoutMs: j.TimeoutMS,
		Stdout: j.Stdout, Stderr: j.Stderr, ExitCode: j.ExitCode, Error: jobErrorToPB(j.Error),
		FuelUsed: j.FuelUsed, Attempt: j.Attempt, NodeId: j.NodeID, Submitter: j.Submitter,
		SubmittedAtMs: j.SubmittedAtMS, StartedAtMs: j.StartedAtMS, PlacedAtMs: j.PlacedAtMS, FinishedAtMs: j.FinishedAtMS,
		CommitIndex: j.CommitIndex, MaxOutputBytes: j.MaxOutput,
		Priority: j.Priority, Constraints: j.Constraints, MaxRetries: j.MaxRetries, RetriesUsed: j.RetriesUsed,
		NotBeforeMs: j.NotBeforeMS, DeadlineAtMs: j.DeadlineAtMS, IdempotencyKey: j.IdempotencyKey,
		PayloadHash: j.PayloadHash, PendingReason: j.PendingReason,
		Script: j.Script, AllowHosts: j.AllowHosts, AllowPrivate: j.AllowPrivate, Artifacts: ArtifactsPB(j.Artifacts), Deterministic: j.Deterministic,
		OutputSchema: j.OutputSchema, InputSchema: j.InputSchema, SkillId: j.SkillID, SkillTool: j.SkillTool,
		RequiresApproval: j.RequiresApproval, RunDeadlineAtMs: j.RunDeadlineAtMS, DecidedBy: j.DecidedBy, DecidedAtMs: j.DecidedAtMS, DecisionReason: j.DecisionReason,
		HookId: j.HookID, Annotations: j.Annotations,
		SecretNames: j.SecretNames, KvPrefix: j.KVPrefix, KvSeq: j.KVSeq, KvSeqRun: j.KVSeqRun,
		InputSha256: j.InputHash, InputSize: j.InputSize, StdoutSha256: j.StdoutHash, StdoutSize: j.StdoutSize,
		StderrSha256: j.StderrHash, StderrSize: j.StderrSize, ArrayId: j.ArrayID, ArrayIndex: j.ArrayIndex,
		EarlierAttempts: earlierToPB(j.Earlier),
	}
}

// JobFromRecord converts a log record into a job (the inverse of JobRecord,
// used where a record crosses the network, e.g. a forwarded apply's result).
func JobFromRecord(r *raftpb.JobRecord) Job { return jobFromRecord(r) }

// JobRecord converts a job into its log record (used to build SubmitJob commands).
func JobRecord(j *Job) *raftpb.JobRecord { return jobToRecord(j) }

// JobErrorPB converts a job error to its log form (used to build FinishJob commands).
func JobErrorPB(e *JobError) *raftpb.Error { return jobErrorToPB(e) }
