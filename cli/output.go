package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// errorJSON is the {code, message, hint} shape on every output path.
type errorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

// jobJSON is the stable JSON form of a job printed by the CLI.
type jobJSON struct {
	ID    string `json:"id"`
	Phase string `json:"phase,omitempty"` // always set, but for an array's template
	Kind  string `json:"kind"`
	// Output and Stderr are the job's stdout and stderr as text; one that
	// is not valid UTF-8 (binary) is empty here and base64 in
	// OutputBase64 / StderrBase64 (a JSON string would mangle its bytes).
	Output       string `json:"output"`
	Stderr       string `json:"stderr"`
	OutputBase64 string `json:"output_base64,omitempty"`
	StderrBase64 string `json:"stderr_base64,omitempty"`
	// ExitCode is the guest's exit status: set when the guest exited
	// (0 for a completed job, the code of one that failed with
	// exit_code), null when it never did (timeout, out_of_fuel,
	// memory_limit, a trap, aborted, expired, not yet run…): a script
	// that tests exit_code == 0 must not take those for a success.
	ExitCode     *int32     `json:"exit_code"`
	Error        *errorJSON `json:"error"`
	Attempt      uint32     `json:"attempt"`
	NodeID       string     `json:"node_id"`
	Submitter    string     `json:"submitter"`
	ModuleSHA256 string     `json:"module_sha256,omitempty"`
	MemoryBytes  uint64     `json:"memory_bytes,omitempty"`
	// Fuel is a wasm job's fuel budget, the node default filled in for
	// one submitted without (or with --fuel 0).
	Fuel      uint64 `json:"fuel,omitempty"`
	TimeoutMS int64  `json:"timeout_ms"`
	// MaxOutputBytes bounds stdout and stderr, each (the default filled
	// in for a job submitted without --max-output).
	MaxOutputBytes uint64            `json:"max_output_bytes"`
	FuelUsed       uint64            `json:"fuel_used"`
	Deterministic  bool              `json:"deterministic,omitempty"`
	SubmittedAt    string            `json:"submitted_at,omitempty"`
	PlacedAt       string            `json:"placed_at,omitempty"`
	StartedAt      string            `json:"started_at,omitempty"`
	FinishedAt     string            `json:"finished_at,omitempty"`
	CommitIndex    uint64            `json:"commit_index"`
	Priority       int32             `json:"priority"`
	Constraints    map[string]string `json:"constraints,omitempty"`
	MaxRetries     uint32            `json:"max_retries"`
	// IdempotencyKey is the key the job was submitted with, if any.
	IdempotencyKey string         `json:"idempotency_key,omitempty"`
	RetriesUsed    uint32         `json:"retries_used"`
	DeadlineAt     string         `json:"deadline_at,omitempty"`
	PendingReason  string         `json:"pending_reason,omitempty"`
	Artifacts      []artifactJSON `json:"artifacts,omitempty"`
	AllowHosts     []string       `json:"allow_hosts,omitempty"`
	AllowPrivate   bool           `json:"allow_private,omitempty"`
	SecretNames    []string       `json:"secrets,omitempty"`
	KVPrefix       string         `json:"kv_prefix,omitempty"`
	// Sizes are always there; hashes name payloads stored as blobs. A
	// list carries no input or output bytes, only these.
	InputSize    uint64 `json:"input_size"`
	OutputSize   uint64 `json:"output_size"`
	StderrSize   uint64 `json:"stderr_size"`
	InputSHA256  string `json:"input_sha256,omitempty"`
	OutputSHA256 string `json:"output_sha256,omitempty"`
	StderrSHA256 string `json:"stderr_sha256,omitempty"`
	// A task of a job array: the array's id and the task's index.
	ArrayID    string  `json:"array_id,omitempty"`
	ArrayIndex *uint32 `json:"array_index,omitempty"`
	// A skill tool's run, and a person's decision on one that required
	// approval.
	SkillID          string   `json:"skill_id,omitempty"`
	SkillTool        string   `json:"skill_tool,omitempty"`
	RequiresApproval bool     `json:"requires_approval,omitempty"`
	DecidedBy        string   `json:"decided_by,omitempty"`
	DecidedAt        string   `json:"decided_at,omitempty"`
	DecisionReason   string   `json:"decision_reason,omitempty"`
	HookID           string   `json:"hook_id,omitempty"`
	Annotations      []string `json:"annotations,omitempty"`
	// EarlierAttempts: attempts that ended without ending the job, oldest
	// first (the cluster keeps the last 16).
	EarlierAttempts []attemptJSON `json:"earlier_attempts,omitempty"`
	// WaitingForSlot: running, but its worker holds it until a slot is
	// free (job get asks the worker; not in lists or watches).
	WaitingForSlot bool `json:"waiting_for_slot,omitempty"`
}

// attemptJSON is an earlier attempt of a job: where it ran, how it ended.
type attemptJSON struct {
	Attempt  uint32 `json:"attempt"`
	NodeID   string `json:"node_id"`
	PlacedAt string `json:"placed_at,omitempty"`
	EndedAt  string `json:"ended_at,omitempty"`
	Code     string `json:"code"` // "requeued", or the failed run's error code
	Reason   string `json:"reason,omitempty"`
}

// listJobJSON is a job in a list: a list carries no payloads, so it has
// no output or stderr keys (an empty "output" read as an empty result);
// output_size and stderr_size say what 'palyra job get ID' would show.
type listJobJSON struct {
	jobJSON
	Output *string `json:"output,omitempty"` // always nil: hides jobJSON's
	Stderr *string `json:"stderr,omitempty"` // likewise
}

type artifactJSON struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type"`
	SHA256    string `json:"sha256"`
	Size      uint64 `json:"size"`
}

func msTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(jsonTime)
}

// nullTime is msTime for a map written as JSON: null, not "", for none.
func nullTime(ms int64) any {
	if ms == 0 {
		return nil
	}
	return msTime(ms)
}

// jsonTime is how --json writes a time: RFC 3339 in UTC with exactly
// three decimals (milliseconds, what the cluster records), so times line
// up and sort as text ("…07.260Z", never "…07.26Z").
const jsonTime = "2006-01-02T15:04:05.000Z07:00"

// startedAt is when a job's run began, "" until a result (or, for a
// running job read with job get, its worker) says: the
// cluster records a placed job's start as its placement (it may wait on
// its worker for a slot), and a job cancelled or expired before any
// result may never have started. Printed as it is, a script read a
// made-up start.
func startedAt(j *palyrav1.Job) string {
	if j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && j.RunStartedAtMs > 0 {
		return msTime(j.RunStartedAtMs) // its worker says (job get)
	}
	reported := j.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED || j.Phase == palyrav1.JobPhase_JOB_PHASE_FAILED
	if j.StartedAtMs == 0 || (!reported && j.StartedAtMs == j.PlacedAtMs) {
		return ""
	}
	return msTime(j.StartedAtMs)
}

func toJobJSON(j *palyrav1.Job) jobJSON {
	out := jobJSON{
		ID: j.Id, Phase: j.Phase.WireName(), Kind: j.Kind,
		ExitCode: exitCode(j), Attempt: j.Attempt, NodeID: j.NodeId, Submitter: j.Submitter,
		TimeoutMS: j.TimeoutMs, FuelUsed: j.FuelUsed, Deterministic: j.Deterministic, SubmittedAt: msTime(j.SubmittedAtMs),
		PlacedAt: msTime(j.PlacedAtMs), StartedAt: startedAt(j), FinishedAt: msTime(j.FinishedAtMs), CommitIndex: j.CommitIndex,
		WaitingForSlot: j.WaitingForSlot && j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING,
	}
	out.Output, out.OutputBase64 = textOrBase64(j.Stdout)
	out.Stderr, out.StderrBase64 = textOrBase64(j.Stderr)
	out.Priority, out.Constraints, out.MaxRetries, out.RetriesUsed = j.Priority, j.Constraints, j.MaxRetries, j.RetriesUsed
	out.DeadlineAt, out.PendingReason, out.AllowHosts = msTime(j.DeadlineAtMs), j.PendingReason, j.AllowHosts
	out.AllowPrivate, out.SecretNames, out.KVPrefix = j.AllowPrivate, j.SecretNames, j.KvPrefix
	out.InputSize, out.OutputSize, out.StderrSize = j.InputSize, j.StdoutSize, j.StderrSize
	out.InputSHA256, out.OutputSHA256, out.StderrSHA256 = j.InputSha256, j.StdoutSha256, j.StderrSha256
	out.SkillID, out.SkillTool, out.RequiresApproval = j.SkillId, j.SkillTool, j.RequiresApproval
	out.DecidedBy, out.DecidedAt, out.DecisionReason = j.DecidedBy, msTime(j.DecidedAtMs), j.DecisionReason
	out.HookID, out.Annotations = j.HookId, j.Annotations
	out.IdempotencyKey, out.MaxOutputBytes = j.IdempotencyKey, j.MaxOutputBytes
	if out.MaxOutputBytes == 0 {
		out.MaxOutputBytes = palyrav1.DefaultMaxOutputBytes
	}
	if j.ArrayId != "" {
		idx := j.ArrayIndex
		out.ArrayID, out.ArrayIndex = j.ArrayId, &idx
	}
	for _, a := range j.Artifacts {
		out.Artifacts = append(out.Artifacts, artifactJSON{Name: a.Name, MediaType: a.MediaType, SHA256: a.Sha256, Size: a.Size})
	}
	if j.Wasm != nil {
		out.ModuleSHA256, out.MemoryBytes, out.Fuel = j.Wasm.ModuleSha256, j.Wasm.MemoryBytes, j.Wasm.Fuel
		if out.Fuel == 0 {
			out.Fuel = palyrav1.DefaultFuel
		}
	}
	if j.Error != nil {
		out.Error = &errorJSON{Code: j.Error.Code, Message: j.Error.Message, Hint: j.Error.Hint}
	}
	for _, a := range j.EarlierAttempts {
		out.EarlierAttempts = append(out.EarlierAttempts, attemptJSON{Attempt: a.Attempt, NodeID: a.NodeId,
			PlacedAt: msTime(a.PlacedAtMs), EndedAt: msTime(a.EndedAtMs), Code: a.Code, Reason: a.Reason})
	}
	return out
}

// exitCode is j's exit status if its guest exited: a completed job's
// (0), or the code of one that failed with exit_code; nil otherwise (it
// timed out, ran out of fuel or memory, trapped, was cancelled or
// expired, or has not ended).
func exitCode(j *palyrav1.Job) *int32 {
	switch {
	case j.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED,
		j.Phase == palyrav1.JobPhase_JOB_PHASE_FAILED && j.Error != nil && j.Error.Code == "exit_code":
		code := j.ExitCode
		return &code
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fail prints an error as "error: …" plus "hint: …" (or as JSON with
// --json) and returns the exit error.
func fail(c *ucli.Context, e *client.Error) error {
	return failWith(c, e, exitFailure)
}

// failWith is fail with another exit code.
func failWith(c *ucli.Context, e *client.Error, code int) error {
	e = &client.Error{Code: e.Code, Message: e.Message, Hint: withDataDir(c, e.Hint)}
	if c.Bool("json") {
		_ = writeJSON(errJSONWriter(c), map[string]any{"error": errorJSON{Code: e.Code, Message: e.Message, Hint: e.Hint}})
		return ucli.Exit("", code)
	}
	msg := "error: " + e.Message
	if e.Hint != "" {
		msg += "\nhint: " + e.Hint
	}
	return ucli.Exit(msg, code)
}

// exitInterrupted is the exit code of a command the user interrupted
// (Ctrl-C, SIGTERM): 128 + SIGINT, as a shell reports a command killed
// by Ctrl-C.
const exitInterrupted = 130

// interrupted reports whether the command was interrupted: run cancels
// every command's context on SIGINT or SIGTERM. A call failing then
// fails because of it (a cancelled stream, H3_REQUEST_CANCELLED), and
// the transport diagnosis ("check that a node runs there") is wrong.
func interrupted(c *ucli.Context) bool {
	return c.Context != nil && c.Context.Err() != nil
}

// interruptedError ends a wait that the user interrupted; id is the job
// (or array) followed, "" if the submission was not yet confirmed.
type interruptedError struct {
	id  string
	err error
}

func (e *interruptedError) Error() string { return "interrupted: " + e.err.Error() }
func (e *interruptedError) Unwrap() error { return e.err }

// stoppedFollowing is the answer to an interrupted command that followed
// id, a "job" or "job array" (what): the job is not cancelled by it, so
// say so and how to pick it up again. With id "" the submission itself
// was cut short.
func stoppedFollowing(c *ucli.Context, what, id string) error {
	e := &client.Error{Code: "interrupted"}
	if id == "" {
		e.Message = "interrupted before the node confirmed the submission: the job may or may not have been accepted"
		e.Hint = "look for it with 'palyra job list' before submitting again (a submission with --idempotency-key can be repeated safely)"
	} else {
		e.Message = fmt.Sprintf("interrupted: stopped following %s %s; the %s goes on (interrupting this command does not cancel it)", what, id, what)
		e.Hint = fmt.Sprintf("follow it again with 'palyra job watch %s', see it with 'palyra job get %s', or stop it with 'palyra job cancel %s'", id, id, id)
	}
	return failWith(c, e, exitInterrupted)
}

func usageErr(format string, args ...any) error {
	return ucli.Exit("error: "+fmt.Sprintf(format, args...), exitUsage)
}

// nonNil is s, or an empty slice when s is nil: a list printed as JSON is
// [] when empty, never null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// textOrBase64 is b as text when it is valid UTF-8, else as base64.
func textOrBase64(b []byte) (text, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}

// withDataDir makes the commands a hint names against a node ('palyra
// --addr …') runnable as they stand for a caller who gave --data-dir (or
// PALYRA_DATA_DIR): a node's hint cannot know where the caller's
// credential is. Every error the CLI prints goes through it (failWith).
func withDataDir(c *ucli.Context, hint string) string {
	dir := c.String("data-dir")
	if dir == "" || !c.IsSet("data-dir") {
		return hint
	}
	return strings.ReplaceAll(hint, "'palyra --addr ", "'palyra --data-dir "+dir+" --addr ")
}

// printableText is s as a text column or line shows it: as it is when every rune
// is printable, else quoted with escapes, so a newline or an escape
// sequence in a key or an audit field cannot forge rows or drive the
// terminal (keys written before the API refused them keep theirs).
func printableText(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// jsonStderrKey keeps the real stderr in the app's metadata under --json,
// where the app's ErrWriter discards notes and progress.
const jsonStderrKey = "palyra.stderr"

// errJSONWriter is stderr itself, even under --json: where an error
// object goes, and a prompt to a person at a terminal.
func errJSONWriter(c *ucli.Context) io.Writer {
	if w, ok := c.App.Metadata[jsonStderrKey].(io.Writer); ok {
		return w
	}
	return c.App.ErrWriter
}

// jsonNotes is the app's ErrWriter under --json: each line written that
// is a warning or a note ("warning: …", "note: …") goes to w as one
// {"warning": …} or {"note": …} object; anything else (progress, a
// job's stderr passed through) is left out, as the JSON on stdout holds
// it. Stderr is then JSON objects only, and a script still learns that a
// device's certificate could not be renewed.
type jsonNotes struct{ w io.Writer }

func (j *jsonNotes) Write(p []byte) (int, error) {
	for _, line := range strings.Split(string(p), "\n") {
		for _, kind := range []string{"warning", "note"} {
			if msg, ok := strings.CutPrefix(line, kind+": "); ok {
				_ = writeJSON(j.w, map[string]string{kind: msg})
			}
		}
	}
	return len(p), nil
}

// argCount is "1 argument" or "N arguments".
func argCount(n int) string { return countOf(n, "argument", "arguments") }

// countOf is n with its noun: "1 job", "5 jobs".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
