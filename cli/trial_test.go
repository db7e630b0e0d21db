package cli

// Fixes for what a user trial of job arrays and their commands found.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// Empty lines of --inputs are tasks with an empty input; the command says
// which, since a blank line an editor left at the end made one silently.
func TestEmptyInputLinesAreNoted(t *testing.T) {
	in, err := readInputLines(strings.NewReader("1\n2\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 3 {
		t.Fatalf("%d tasks, want 3 (the empty line is one)", len(in))
	}
	if got := emptyLinesNote(in, "in.txt"); !strings.Contains(got, "1 empty line(s) of in.txt (line 3)") {
		t.Fatalf("note %q; want it to name line 3 of in.txt", got)
	}
	many, _ := readInputLines(strings.NewReader("\n\na\n\n\n\n\n\nb"))
	if got := emptyLinesNote(many, "stdin"); !strings.Contains(got, "7 empty line(s) of stdin (lines 1, 2, 4, 5, 6 and 2 more)") {
		t.Fatalf("note %q", got)
	}
	if got := emptyLinesNote([][]byte{[]byte("a"), []byte("b")}, "x"); got != "" {
		t.Fatalf("no empty line, note %q", got)
	}
}

// The note reaches stderr from 'job submit --inputs' (before anything is
// sent: no node answers here).
func TestSubmitNotesEmptyInputLines(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("1\n2\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "--data-dir", dir, "--addr", "127.0.0.1:1", "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", in)
	if !strings.Contains(r.stderr, "1 empty line(s) of "+in+" (line 3)") {
		t.Fatalf("submit: %+v; want the note naming line 3", r)
	}
}

// 'job list --limit 0' is refused (it meant the default of 100 without a
// word), before any node is asked.
func TestJobListLimitZeroIsRefused(t *testing.T) {
	r := runCLI(t, "--data-dir", t.TempDir(), "--addr", "127.0.0.1:1", "job", "list", "--limit", "0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--limit 0: a page holds 1 to 1000 jobs") {
		t.Fatalf("job list --limit 0: %+v; want a usage error naming the range", r)
	}
}

// A misspelt flag is named as a flag, with the closest one the command
// has (it said "flag provided but not defined: -wiat", single dash).
func TestMisspeltFlagGetsASuggestion(t *testing.T) {
	r := runCLI(t, "job", "submit", "--wiat")
	if r.code != exitUsage || !strings.Contains(r.stderr, "unknown flag --wiat: did you mean --wait?") {
		t.Fatalf("job submit --wiat: %+v", r)
	}
	r = runCLI(t, "job", "submit", "--zzzzzzzz")
	if r.code != exitUsage || !strings.Contains(r.stderr, "unknown flag --zzzzzzzz") || strings.Contains(r.stderr, "did you mean") {
		t.Fatalf("job submit --zzzzzzzz: %+v; want no suggestion for a word like no flag", r)
	}
	if r := runCLI(t, "job", "retention", "-2h"); !strings.Contains(r.stderr, "reads as a flag") {
		t.Fatalf("job retention -2h: %+v; want the negative-argument message kept", r)
	}
}

// A failed job's --wait prints its stderr without the last line the
// failure line quotes (it printed that line twice, as array tasks did).
func TestFailedJobQuotesStderrOnce(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--input", "bogus", "--wait")
	if r.code != exitFailure || strings.Count(r.stderr, `bad duration "bogus"`) != 1 || !strings.Contains(r.stderr, `exited with code 2: bad duration "bogus"`) {
		t.Fatalf("submit --wait of a failing job: %+v; want its stderr's last line once, in the failure line", r)
	}
}

// A failed task's line says how many attempts it had and the fix, as a
// failed job's does (it said only "failed: timed out after 1s (timeout)").
func TestTaskReasonHasAttemptsAndHint(t *testing.T) {
	got := taskReason(&palyrav1.Job{Phase: palyrav1.JobPhase_JOB_PHASE_FAILED, Attempt: 3,
		Error: &palyrav1.Error{Code: "timeout", Message: "timed out after 1s", Hint: "raise it with --timeout"}})
	if want := "failed after 3 attempts: timed out after 1s (timeout); raise it with --timeout"; got != want {
		t.Fatalf("taskReason = %q, want %q", got, want)
	}
	if got := taskReason(&palyrav1.Job{Phase: palyrav1.JobPhase_JOB_PHASE_ABORTED, Attempt: 1, Error: &palyrav1.Error{Code: "aborted", Message: "cancelled"}}); got != "aborted: cancelled (aborted)" {
		t.Fatalf("taskReason of a cancelled task = %q", got)
	}
}

// On a terminal the progress line is cut to its width: a line wider than
// the terminal wraps, and each redraw (\r) left the row above it stale.
func TestArrayProgressFitsTheTerminal(t *testing.T) {
	var b strings.Builder
	p := &progress{w: &b, tty: true, cols: 50}
	p.update(&palyrav1.JobArray{Id: "j-0123456789abcdef", Size: 2000, Counts: map[string]uint64{"completed": 580, "failed": 96, "running": 64, "queued": 1260}})
	for _, line := range strings.Split(b.String(), "\r\033[K") {
		if len(line) > 49 {
			t.Fatalf("a progress line of %d characters on a 50-column terminal: %q", len(line), line)
		}
	}
	if !strings.Contains(b.String(), "676/2000 ended") {
		t.Fatalf("progress %q lost its count", b.String())
	}
}

// 'job cancel' takes several ids: each is cancelled in turn, one that
// cannot be (ended, unknown) is reported without stopping the others, and
// the command exits 1 then. It took exactly one.
func TestCancelTakesSeveralIDs(t *testing.T) {
	c := startNode(t)
	submit := func(args ...string) string {
		t.Helper()
		r := c.cli(append([]string{"job", "submit"}, args...)...)
		if r.code != 0 {
			t.Fatalf("submit %v: %+v", args, r)
		}
		return strings.TrimSpace(r.stdout)
	}
	spin := func() string {
		return submit("--wasm", testwasm.Path(t, "sleep"), "--input", "10m", "--timeout", "20m")
	}
	// The ended job first: the node's slots then go to the sleeping ones.
	submit("--wasm", testwasm.Path(t, "reverse"), "--input", "x", "--wait") // its id comes from the list
	a, b := spin(), spin()
	r := c.cli("job", "list", "--phase", "completed", "--json")
	var list struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Jobs) != 1 {
		t.Fatalf("list completed: %v %+v", err, r)
	}
	done := list.Jobs[0].ID

	r = c.cli("job", "cancel", a, done, "j-0000000000000000", b)
	if r.code != exitFailure || !strings.Contains(r.stdout, a+" aborted") || !strings.Contains(r.stdout, b+" aborted") ||
		!strings.Contains(r.stderr, done+" is already completed") || !strings.Contains(r.stderr, "j-0000000000000000") ||
		!strings.Contains(r.stderr, "2 of 4 could not be cancelled") {
		t.Fatalf("cancel of 4 ids: %+v; want the two running aborted, the other two reported, exit 1", r)
	}

	c2, d := spin(), spin()
	r = c.cli("job", "cancel", c2, d, "--json")
	var out []struct{ ID, Phase string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || len(out) != 2 || out[0].ID != c2 || out[1].Phase != "aborted" {
		t.Fatalf("cancel --json of 2: %v %+v; want an array of both, aborted", err, r)
	}
	// Under --json stderr is one document: the summary and each failure.
	e := spin()
	r = c.cli("job", "cancel", e, "j-0000000000000000", "--json")
	var errDoc struct {
		Error    errorJSON   `json:"error"`
		Failures []errorJSON `json:"failures"`
	}
	if err := json.Unmarshal([]byte(r.stderr), &errDoc); err != nil || r.code != exitFailure || errDoc.Error.Message != "1 of 2 could not be cancelled" ||
		len(errDoc.Failures) != 1 || !strings.Contains(errDoc.Failures[0].Message, "j-0000000000000000") {
		t.Fatalf("cancel --json with a failure: %v %+v; want one JSON document on stderr naming it", err, r)
	}
	if r := c.cli("job", "cancel"); r.code != exitUsage {
		t.Fatalf("cancel without an id: %+v; want a usage error", r)
	}
}

// 'job submit --input -' gives the job the text "-" and says so, naming
// --input-file - for stdin (a user lost a run to it).
func TestInputDashIsNoted(t *testing.T) {
	r := runCLI(t, "--data-dir", t.TempDir(), "--addr", "127.0.0.1:1", "--dial-timeout", "200ms", "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "-")
	if !strings.Contains(r.stderr, `note: --input - gives the job the text "-"; to pass stdin use --input-file -`) {
		t.Fatalf("submit --input -: %+v; want the note", r)
	}
}

// A --data-dir that does not exist (or holds no operator credential) is
// named as such, with the way to use a paired device instead; it said to
// pair this device, though one was paired.
func TestMissingDataDirIsNamed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo")
	r := runCLI(t, "--data-dir", missing, "status")
	if r.code != exitFailure || !strings.Contains(r.stderr, "--data-dir "+missing+" does not exist; check the path, or leave --data-dir out") {
		t.Fatalf("status with a missing --data-dir: %+v", r)
	}
	empty := t.TempDir()
	if r := runCLI(t, "--data-dir", empty, "status"); !strings.Contains(r.stderr, "--data-dir "+empty+" holds no operator credential") {
		t.Fatalf("status with a --data-dir without a credential: %+v", r)
	}
}

// --kv-prefix without a trailing slash is noted: a prefix of bytes, "app"
// grants "appx/…" too.
func TestKVPrefixWithoutSlashIsNoted(t *testing.T) {
	r := runCLI(t, "--data-dir", t.TempDir(), "--addr", "127.0.0.1:1", "--dial-timeout", "200ms", "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--kv-prefix", "app")
	if !strings.Contains(r.stderr, "note: --kv-prefix app also grants keys such as appx/…; end it with / (app/)") {
		t.Fatalf("submit --kv-prefix app: %+v; want the note", r)
	}
	if r := runCLI(t, "--data-dir", t.TempDir(), "--addr", "127.0.0.1:1", "--dial-timeout", "200ms", "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--kv-prefix", "app/"); strings.Contains(r.stderr, "note: --kv-prefix") {
		t.Fatalf("submit --kv-prefix app/: %+v; want no note", r)
	}
}
