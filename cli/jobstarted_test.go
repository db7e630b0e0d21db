package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	palyrav1 "github.com/palyra-mesh/palyra/proto/palyrav1"
)

// 'job get' (and --json) shows "started" only when the cluster knows the run began: a
// task cancelled while it waited on its worker for a slot showed its
// placement time as when it started (a user trial: a task that never ran
// "started" at once).
func TestJobGetShowsStartedOnlyForRunsThatBegan(t *testing.T) {
	placed := int64(1_790_000_000_000)
	for _, tc := range []struct {
		name    string
		phase   palyrav1.JobPhase
		started int64
		want    bool
	}{
		{"cancelled while waiting for a slot", palyrav1.JobPhase_JOB_PHASE_ABORTED, placed, false},
		{"expired while waiting for a slot", palyrav1.JobPhase_JOB_PHASE_EXPIRED, placed, false},
		{"cancelled after its run was reported", palyrav1.JobPhase_JOB_PHASE_ABORTED, placed + 500, true},
		{"completed at once", palyrav1.JobPhase_JOB_PHASE_COMPLETED, placed, true},
		{"failed", palyrav1.JobPhase_JOB_PHASE_FAILED, placed + 20, true},
		{"running (maybe waiting for a slot)", palyrav1.JobPhase_JOB_PHASE_RUNNING, placed, false},
	} {
		j := &palyrav1.Job{Id: "j-1.4", Phase: tc.phase, Attempt: 1, NodeId: "n-1", Kind: "wasm",
			SubmittedAtMs: placed - 10, PlacedAtMs: placed, StartedAtMs: tc.started}
		if tc.phase.Terminal() {
			j.FinishedAtMs = placed + 1000
		}
		var b bytes.Buffer
		printJob(&b, j)
		if got := strings.Contains(b.String(), "\nstarted"); got != tc.want {
			t.Errorf("%s: 'started' shown %v, want %v:\n%s", tc.name, got, tc.want, b.String())
		}
		// --json says the same: no started_at until a result says when
		// (it carried the placement time, which a script took for a start).
		if got := toJobJSON(j).StartedAt != ""; got != tc.want {
			t.Errorf("%s: --json started_at set %v, want %v", tc.name, got, tc.want)
		}
	}
}

// 'job watch' says how an attempt ended even when the re-queue and the
// next placement commit together (a user trial: "running attempt 1 on A",
// then "running attempt 2 on B", and no word of why).
func TestWatchSaysHowAnAttemptEnded(t *testing.T) {
	at := int64(1_790_000_000_000)
	var out bytes.Buffer
	c := watchContext(&out)
	one := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, Attempt: 1, NodeId: "n-a", PlacedAtMs: at}
	ended := &palyrav1.JobAttempt{Attempt: 1, NodeId: "n-a", PlacedAtMs: at, EndedAtMs: at + 1500, Code: "requeued", Reason: "worker n-a is dead"}
	two := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, Attempt: 2, NodeId: "n-b", PlacedAtMs: at + 1500,
		EarlierAttempts: []*palyrav1.JobAttempt{ended}}
	for _, step := range [][2]*palyrav1.Job{{one, nil}, {two, one}} {
		if err := printWatched(c, step[0], step[1]); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[1] != "2026-09-21 14:13:21.500  attempt 1 on n-a ended (requeued: worker n-a is dead)" || !strings.Contains(lines[2], "running  attempt 2  on n-b") {
		t.Errorf("watch lines:\n%s", out.String())
	}
	// Queued in between: the queued line says it, once.
	out.Reset()
	queued := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_QUEUED, Attempt: 1, NodeId: "n-a", EarlierAttempts: two.EarlierAttempts}
	for _, step := range [][2]*palyrav1.Job{{queued, one}, {two, queued}} {
		if err := printWatched(c, step[0], step[1]); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(out.String(), "worker n-a is dead"); got != 1 || !strings.Contains(out.String(), "queued  attempt 1 on n-a ended (requeued: worker n-a is dead)") {
		t.Errorf("watch lines with a queued state between:\n%s", out.String())
	}
}

func TestTerminalSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\ttabbed":    "plain text\n\ttabbed",
		"\x1b[2J\x1b]0;owned\x07": `\x1b[2J\x1b]0;owned\x07`,
		"caf\u00e9 \u009b1m":      "caf\u00e9 \\x9b1m",
	} {
		if got := terminalSafe(in); got != want {
			t.Errorf("terminalSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// A running job read with 'job get' says what its worker says: waiting
// for a free slot there, or when its run began.
func TestJobGetShowsTheWorkersRunStatus(t *testing.T) {
	placed := int64(1_790_000_000_000)
	j := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, Attempt: 1, NodeId: "n-1", Kind: "wasm",
		SubmittedAtMs: placed - 10, PlacedAtMs: placed, StartedAtMs: placed, WaitingForSlot: true}
	var b bytes.Buffer
	printJob(&b, j)
	if out := b.String(); !strings.Contains(out, "for a free slot on n-1 (a worker takes placements ahead of its slots)") || strings.Contains(out, "\nstarted") {
		t.Errorf("a job waiting for a slot:\n%s", out)
	}
	if v := toJobJSON(j); !v.WaitingForSlot || v.StartedAt != "" {
		t.Errorf("--json of a job waiting for a slot: waiting %v, started %q", v.WaitingForSlot, v.StartedAt)
	}
	j.WaitingForSlot, j.RunStartedAtMs = false, placed+250
	b.Reset()
	printJob(&b, j)
	if out := b.String(); !strings.Contains(out, "2026-09-21T14:13:20.250Z") || !strings.Contains(out, "\nstarted") || strings.Contains(out, "waiting") {
		t.Errorf("a job its worker runs:\n%s", out)
	}
}

// A queued job that ran before keeps its last placement; 'job get' says
// it is the last one, not where the job is (after a snapshot restore a
// queued job showed a removed node and a placement time as if placed).
func TestJobGetOfARequeuedJobSaysWhereItLastRan(t *testing.T) {
	j := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_QUEUED, Attempt: 2, NodeId: "n-9d81fccc", Kind: "wasm",
		SubmittedAtMs: 1_790_000_000_000, PlacedAtMs: 1_790_000_001_000}
	var b bytes.Buffer
	printJob(&b, j)
	out := b.String()
	if !strings.Contains(out, "none yet (the last attempt was placed on n-9d81fccc)") || !strings.Contains(out, "\nlast placed") {
		t.Errorf("a re-queued job's node and placement:\n%s", out)
	}
	j.Phase = palyrav1.JobPhase_JOB_PHASE_RUNNING
	b.Reset()
	printJob(&b, j)
	if out := b.String(); strings.Contains(out, "none yet") || !strings.Contains(out, "\nplaced") {
		t.Errorf("a running job's node and placement:\n%s", out)
	}
}

// 'job get' tells a re-run job's story: each earlier attempt, where it
// ran, when and why it ended (a user trial: "attempt 3" and nothing on
// what became of 1 and 2); --json carries the same.
func TestJobGetShowsEarlierAttempts(t *testing.T) {
	at := int64(1_790_000_000_000)
	j := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_COMPLETED, Attempt: 3, NodeId: "n-3", Kind: "wasm",
		SubmittedAtMs: at, PlacedAtMs: at + 5000, FinishedAtMs: at + 6000, MaxRetries: 2, RetriesUsed: 1,
		EarlierAttempts: []*palyrav1.JobAttempt{
			{Attempt: 1, NodeId: "n-1", PlacedAtMs: at + 10, EndedAtMs: at + 2000, Code: "requeued", Reason: "worker n-1 is dead"},
			{Attempt: 2, NodeId: "n-2", PlacedAtMs: at + 2100, EndedAtMs: at + 3000, Code: "trap", Reason: "unreachable\x1b[2J"},
		}}
	var b bytes.Buffer
	printJob(&b, j)
	out := b.String()
	for _, want := range []string{
		"earlier attempts  1 on n-1, placed 2026-09-21T14:13:20.010Z, ended 2026-09-21T14:13:22.000Z: requeued: worker n-1 is dead\n",
		"                  2 on n-2, placed 2026-09-21T14:13:22.100Z, ended 2026-09-21T14:13:23.000Z: trap: \"unreachable\\x1b[2J\"",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("a reason's control characters reached the terminal:\n%q", out)
	}
	v := toJobJSON(j)
	if len(v.EarlierAttempts) != 2 || v.EarlierAttempts[1] != (attemptJSON{Attempt: 2, NodeID: "n-2",
		PlacedAt: "2026-09-21T14:13:22.100Z", EndedAt: "2026-09-21T14:13:23.000Z", Code: "trap", Reason: "unreachable\x1b[2J"}) {
		t.Errorf("--json earlier attempts: %+v", v.EarlierAttempts)
	}
	// Queued again after attempt 2: watch and --wait say how it ended, stamped when.
	q := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_QUEUED, Attempt: 2, NodeId: "n-2", EarlierAttempts: j.EarlierAttempts}
	if got := endedAttempt(q); got != j.EarlierAttempts[1] {
		t.Errorf("endedAttempt %v, want attempt 2", got)
	}
	// --wait says each attempt that ended once, after the first sight.
	var notes bytes.Buffer
	r := &reasonPrinter{w: &notes}
	first := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, Attempt: 2, EarlierAttempts: j.EarlierAttempts[:1]}
	r.see(first)
	r.see(q)
	r.see(j)
	if got, want := notes.String(), "job j-1 attempt 2 on n-2 ended (trap: \"unreachable\\x1b[2J\"); it runs again\n"; got != want {
		t.Errorf("--wait notes %q, want %q", got, want)
	}
	if got := phaseSince(q); !got.Equal(time.UnixMilli(at + 3000)) {
		t.Errorf("queued again since %v, want its attempt's end", got)
	}
	q.Phase = palyrav1.JobPhase_JOB_PHASE_RUNNING
	if endedAttempt(q) != nil {
		t.Error("a running job reads as queued again")
	}
	j.EarlierAttempts = nil
	b.Reset()
	printJob(&b, j)
	if strings.Contains(b.String(), "earlier") {
		t.Errorf("a job run once shows earlier attempts:\n%s", b.String())
	}
}

// A stream cut because the credential was revoked (or expired) is not
// opened again: every node refuses the credential in the handshake, and
// 'job watch' and 'job logs -f' retried, silent, for a minute before
// saying so.
func TestWatchIsNotRetriedWithARefusedCredential(t *testing.T) {
	refused := fmt.Errorf("unavailable: dial 127.0.0.1:7444: %w", errors.New("CRYPTO_ERROR 0x12a (remote): tls: bad certificate"))
	if watchRetryable(refused) || !client.CredentialRefused(refused) {
		t.Errorf("a refused credential is retried: %v", refused)
	}
	unknown := fmt.Errorf("unavailable: dial 127.0.0.1:7444: %w", errors.New("CRYPTO_ERROR 0x12e (remote): tls: unknown certificate"))
	if watchRetryable(unknown) || !client.CredentialRefused(unknown) {
		t.Errorf("a credential the cluster does not know is retried: %v", unknown)
	}
	lost := errors.New("timeout: no recent network activity")
	if !watchRetryable(lost) || client.CredentialRefused(lost) {
		t.Errorf("a node that went silent is not retried: %v", lost)
	}
}

// 'job watch' says when a placed job waits on its worker for a slot, and
// when it then starts (the phase is "running" throughout: a user read a
// job held behind a long one as running).
func TestWatchSaysWhenARunWaitsForASlot(t *testing.T) {
	at := int64(1_790_000_000_000)
	var out bytes.Buffer
	c := watchContext(&out)
	waiting := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, Attempt: 1, NodeId: "n-a", PlacedAtMs: at, WaitingForSlot: true}
	began := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, Attempt: 1, NodeId: "n-a", PlacedAtMs: at, RunStartedAtMs: at + 2500}
	for _, step := range [][2]*palyrav1.Job{{waiting, nil}, {began, waiting}} {
		if err := printWatched(c, step[0], step[1]); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "running  attempt 1  on n-a  (placed; waiting there for a free slot)") ||
		lines[1] != "2026-09-21 14:13:22.500  running  attempt 1  on n-a  (started: it has its slot)" {
		t.Errorf("watch lines:\n%s", out.String())
	}
}

// watchContext is a 'job watch' context (no --json) writing to out.
func watchContext(out *bytes.Buffer) *ucli.Context {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.Bool("json", false, "")
	return ucli.NewContext(&ucli.App{Writer: out, ErrWriter: &bytes.Buffer{}}, fs, nil)
}
