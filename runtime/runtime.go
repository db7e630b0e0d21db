// Package runtime defines the executor contract shared by every kind of
// sandboxed work a Palyra worker runs. Concrete executors live in
// sub-packages (wasm/, browser/); the worker only sees this interface.
//
// runtime never imports consensus, mesh or node: an executor takes bytes and
// limits in and gives a Result out, so it can be tested and benchmarked alone.
package runtime

import (
	"context"
	"errors"
	"time"
)

// Kind names an executor kind; it is also the capacity key workers advertise.
type Kind string

// Executor kinds.
const (
	KindWasm    Kind = "wasm"
	KindBrowser Kind = "browser"
)

// Reason says why a run did not complete normally. The empty Reason means
// the work ran to completion (for wasm: exit code 0).
type Reason string

// Reasons shared by executors. They are wire names: job errors carry them as
// their code, so keep them stable.
const (
	ReasonNone          Reason = ""
	ReasonTimeout       Reason = "timeout"        // wall-clock limit reached
	ReasonMemoryLimit   Reason = "memory_limit"   // guest tried to grow past its memory limit
	ReasonOutputLimit   Reason = "output_limit"   // stdout or stderr exceeded its bound
	ReasonOutOfFuel     Reason = "out_of_fuel"    // deterministic fuel budget exhausted
	ReasonTrap          Reason = "trap"           // guest trapped (unreachable, bad access, stack overflow…)
	ReasonExitCode      Reason = "exit_code"      // guest exited with a non-zero status
	ReasonInvalidModule Reason = "invalid_module" // module failed to decode, validate or compile
	ReasonCanceled      Reason = "canceled"       // the caller cancelled the run (job aborted)
	ReasonInternal      Reason = "internal"       // the executor itself failed
	ReasonBlocked       Reason = "blocked"        // a request or navigation outside the job's grants
	ReasonStepFailed    Reason = "step_failed"    // a script step could not be performed
	ReasonCrashed       Reason = "crashed"        // the sandbox process (browser) died mid-job
	ReasonOutputInvalid Reason = "output_invalid" // a skill tool wrote output its output_schema refuses
	ReasonInputInvalid  Reason = "input_invalid"  // a hook job's input does not match its tool's input_schema (it did not run)
	ReasonBusy          Reason = "busy"           // Spec.NoWait and no slot free: nothing ran (never a job's outcome)
)

// Spec is one unit of work with its limits. Zero limits mean "use the
// executor's default", never "unlimited".
type Spec struct {
	// Module is the wasm binary (for KindWasm).
	Module []byte
	// ModuleHash is the lowercase hex sha256 of Module; executors use it as
	// the compilation-cache key. If empty the executor computes it.
	ModuleHash string
	// Input is fed to the guest as stdin.
	Input []byte
	// Timeout bounds wall-clock time of the whole run.
	Timeout time.Duration
	// MemoryLimit bounds the guest's linear memory in bytes.
	MemoryLimit uint64
	// MaxOutput bounds stdout and stderr, each, in bytes.
	MaxOutput int
	// Fuel is the deterministic instruction budget (0 = executor default).
	Fuel uint64
	// Script is the job's program for script-driven executors (browser:
	// a JSON list of steps).
	Script []byte
	// AllowHosts lists the hosts the job may reach: "example.com" matches
	// that host and its subdomains. Empty means no network.
	AllowHosts []string
	// AllowPrivate permits private, loopback and link-local targets, which
	// are refused (after DNS resolution) otherwise.
	AllowPrivate bool
	// Grants are the host capabilities beyond the network (secrets,
	// key-value storage) and the services behind them. Nil grants nothing.
	Grants *Grants
	// GrantsFrom names where AllowHosts and Grants came from when not from
	// the job's own flags (a skill tool's manifest), for refusals.
	GrantsFrom string
	// Deterministic (wasm) runs the guest on a virtual clock that advances
	// with the fuel it burns (and by what it sleeps, without waiting),
	// with random bytes from a generator seeded by the module and input:
	// the same module and input give the same stdout, stderr and fuel
	// anywhere, any time. Needs fuel metering.
	Deterministic bool
	// Tap, if set, gets every accepted byte of stdout and stderr as it is
	// written, for followers ('palyra job logs -f'), and is told when the
	// run gets its slot (Tap.Start). Every executor must call Start once it
	// has the slot and before any of the job's code runs, and must not run
	// the job when Start returns false: a worker withdraws runs still
	// waiting (Tap.Withdraw) and has the job run elsewhere, so a run that
	// went on would run twice. Executors that have no streams write
	// nothing to it; the worker closes it.
	Tap *Tap
	// Order ranks this run among those waiting for a slot of its executor:
	// the first in Order starts first (see Order.Before).
	Order Order
	// Queued, if set, is called once when the run has taken its place
	// among those waiting for a slot (or got one at once): a caller that
	// starts runs together holds each back until the one before it in
	// Order is queued, so they are admitted in Order however their
	// goroutines are scheduled. An executor without ordered slots calls
	// it when it starts to wait for a slot.
	Queued func()
	// NoWait runs only if a slot is free now, with no run waiting for
	// one, and the module needs no compiling; otherwise the run returns at
	// once with ReasonBusy, having done nothing (a node trying a job it was just given before it asks the
	// cluster to schedule it).
	NoWait bool
}

// Order ranks runs waiting for a slot: higher Priority first, then the
// job accepted first (lower Seq, its commit index), then the lower Index
// (an array's task index). Runs of equal order start in arrival order.
type Order struct {
	Priority int32
	Seq      uint64
	Index    uint32
}

// Before reports whether o starts before p.
func (o Order) Before(p Order) bool {
	if o.Priority != p.Priority {
		return o.Priority > p.Priority
	}
	if o.Seq != p.Seq {
		return o.Seq < p.Seq
	}
	return o.Index < p.Index
}

// Grants lists the capabilities a job may use besides the network, with
// the per-run services that serve them. Nothing is granted by default: a
// guest asking for a capability it lacks gets an error, never a trap.
type Grants struct {
	// SecretNames are the secrets the job may read, by exact name.
	SecretNames []string
	// KVPrefix is the key prefix the job may read and write under ("" = no
	// key-value access). Keys are full keys; each must start with KVPrefix.
	KVPrefix string
	// Secrets serves secret reads (required when SecretNames is not empty).
	Secrets Secrets
	// KV serves key-value operations (required when KVPrefix is set).
	KV KV
}

// Secrets gives a job read access to named secrets. Implementations must
// never log or wrap a secret's value into an error.
type Secrets interface {
	// Get returns the secret's value; an error matching ErrNotFound when
	// there is no such secret.
	Get(ctx context.Context, name string) ([]byte, error)
}

// KV is the key-value store jobs reach through their KVPrefix grant.
type KV interface {
	// Get returns the value of key and whether it exists.
	Get(ctx context.Context, key string) ([]byte, bool, error)
	// Put stores val under key, replacing any previous value.
	Put(ctx context.Context, key string, val []byte) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// ErrNotFound is returned by Secrets.Get for an unknown secret.
var ErrNotFound = errors.New("not found")

// ErrRefused wraps a KV write the store refused for good (the store is
// full, a limit): the guest gets "bad request" with the reason, not
// "service unavailable", which says to retry.
var ErrRefused = errors.New("refused")

// Artifact is a named file a job produced (a screenshot, a PDF). The node
// stores its bytes as a content-addressed blob.
type Artifact struct {
	Name      string // unique within the job, e.g. "step3.png"
	MediaType string // e.g. "image/png", "application/pdf"
	Data      []byte
}

// Result is what a run produced. Stdout/Stderr hold what was captured up to
// MaxOutput even when the run failed.
type Result struct {
	Reason  Reason
	Message string // what happened: one line, human readable, set when Reason != ReasonNone
	// Hint is what to do about it, one line (e.g. "raise it with
	// --timeout"); empty when the executor has nothing to suggest.
	Hint     string
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	FuelUsed uint64
	Duration time.Duration // the whole call, a wait for a free slot included
	// Ran is the run itself: from when it had a slot (for a browser job,
	// a slot and a browser) to its end; 0 when it never got one.
	Ran       time.Duration
	Artifacts []Artifact
}

// OK reports whether the run completed normally.
func (r Result) OK() bool { return r.Reason == ReasonNone }

// Executor runs Specs of one Kind. Run must honour ctx cancellation promptly
// (returning ReasonCanceled) and must never panic on hostile input.
type Executor interface {
	Kind() Kind
	Run(ctx context.Context, spec Spec) Result
	Close(ctx context.Context) error
}

// ModuleCache is implemented by executors that keep compiled modules by
// hash. RunCached runs spec without its module bytes when the module named
// by spec.ModuleHash is compiled already, so the caller need not read and
// hash it; ok is false, and nothing ran, when it is not (the caller then
// calls Run with the bytes).
type ModuleCache interface {
	RunCached(ctx context.Context, spec Spec) (res Result, ok bool)
}
