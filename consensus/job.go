package consensus

import "fmt"

// JobError is a job's failure reason: a stable code plus human text.
type JobError struct {
	Code    string
	Message string
	Hint    string
}

// Job is the replicated record of one job. Values handed out by State are
// copies: mutating them changes nothing.
type Job struct {
	ID          string
	Phase       Phase
	Kind        string // "wasm" | "browser"
	ModuleHash  string // sha256 hex of the wasm module blob
	MemoryBytes uint64
	Fuel        uint64
	Input       []byte
	TimeoutMS   int64
	MaxOutput   uint64 // bytes per stream; 0 = executor default

	Stdout   []byte
	Stderr   []byte
	ExitCode int32
	Error    *JobError
	FuelUsed uint64

	Attempt   uint32 // fencing token of the current/last placement
	NodeID    string
	Submitter string

	SubmittedAtMS int64
	// StartedAtMS is when the run began: the placement time while the job
	// runs or waits on its worker for a slot, and once a result that says
	// how long the run took (FinishJob.ran_us) is applied, that long
	// before the result's time (never before the placement). The result's
	// time is the leader's when it proposed it, a few milliseconds after
	// the run ended on a busy cluster, so both are that much late: right
	// for a job of seconds, not a measure of a millisecond's run.
	StartedAtMS  int64
	PlacedAtMS   int64 // when the leader placed the current/last attempt
	FinishedAtMS int64
	CommitIndex  uint64 // raft index at which the job was accepted

	Priority       int32
	Constraints    map[string]string // node labels k=v all required
	MaxRetries     uint32
	RetriesUsed    uint32
	NotBeforeMS    int64 // retry backoff: not placed before
	DeadlineAtMS   int64 // 0 = none
	IdempotencyKey string
	PayloadHash    []byte
	PendingReason  string // why a queued job waits

	Script       []byte // browser jobs: JSON steps
	AllowHosts   []string
	AllowPrivate bool
	// Deterministic runs the wasm job on a virtual clock and seeded
	// randomness (runtime.Spec.Deterministic).
	Deterministic bool
	// OutputSchema (a skill tool's run): stdout must be JSON this JSON
	// Schema accepts; SkillID and SkillTool name what runs.
	OutputSchema string
	// InputSchema (a hook job): the input must be JSON this JSON Schema
	// accepts; the worker checks it before running (input_invalid).
	InputSchema string
	SkillID     string
	SkillTool   string
	// Approval (a run of a requires_approval tool): waiting in
	// PhaseWaitingForApproval until DeadlineAtMS, then RunDeadlineAtMS is
	// the job's own deadline; the decision is recorded.
	RequiresApproval bool
	RunDeadlineAtMS  int64
	DecidedBy        string
	DecidedAtMS      int64
	DecisionReason   string
	// HookID: the job runs a hook (and triggers none); Annotations were
	// added by before_run hooks.
	HookID      string
	Annotations []string
	Artifacts   []Artifact
	SecretNames []string // granted secrets
	KVPrefix    string   // granted key-value prefix
	// KVSeq is the last key-value write (its seq) applied for the run
	// KVSeqRun (a worker's nonce for one run of the current attempt): a
	// retry of it is applied once.
	KVSeq    uint64
	KVSeqRun uint64

	// Payloads above InlineLimit are blobs: the hash names the content and
	// the inline field is empty. Size is the payload's length either way.
	InputHash  string
	InputSize  uint64
	StdoutHash string
	StdoutSize uint64
	StderrHash string
	StderrSize uint64

	// ArrayID is set on the tasks of a job array; ArrayIndex is the task's
	// position in it (task ids are ArrayID + "." + index).
	ArrayID    string
	ArrayIndex uint32

	// Earlier holds the attempts that ended without ending the job, oldest
	// first, the last MaxEarlierAttempts (see EarlierAttempt).
	Earlier []EarlierAttempt
}

// EarlierAttempt is an attempt of a job that ended without ending the job:
// its worker died, stopped, restarted or lost its lease (Code "requeued"),
// or its run failed and was retried (Code is the run's error code). It is
// for people reading the job's story; no decision depends on it.
type EarlierAttempt struct {
	Attempt    uint32
	NodeID     string
	PlacedAtMS int64
	EndedAtMS  int64 // 0: not known (an entry from before the time was sent)
	Code       string
	Reason     string
}

// MaxEarlierAttempts bounds Job.Earlier: a job retried or re-queued more
// often keeps the latest ones.
const MaxEarlierAttempts = 16

// endAttempt records j's current attempt as ended (code, reason, at) in a
// new slice: copies of j handed out earlier share the old one.
func (j *Job) endAttempt(code, reason string, atMS int64) {
	keep := j.Earlier
	if len(keep) >= MaxEarlierAttempts {
		keep = keep[len(keep)-MaxEarlierAttempts+1:]
	}
	out := make([]EarlierAttempt, len(keep), len(keep)+1)
	copy(out, keep)
	j.Earlier = append(out, EarlierAttempt{Attempt: j.Attempt, NodeID: j.NodeID, PlacedAtMS: j.PlacedAtMS,
		EndedAtMS: atMS, Code: code, Reason: reason})
}

// InlineLimit is the largest input or output carried in the Raft log
// itself; anything larger travels as a content-addressed blob.
const InlineLimit = 4 << 10

// TaskID is the id of task i of array id.
func TaskID(array string, i uint32) string { return fmt.Sprintf("%s.%d", array, i) }

// Artifact is a file a job produced, stored as a blob.
type Artifact struct {
	Name      string
	MediaType string
	SHA256    string
	Size      uint64
}

// clone returns a deep copy (byte slices are shared read-only, the error is copied).
func (j *Job) clone() Job {
	c := *j
	if j.Error != nil {
		e := *j.Error
		c.Error = &e
	}
	return c
}
