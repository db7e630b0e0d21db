package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testbuf"
	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// exitCodeOf decodes one job's JSON and returns its exit_code key: nil
// for null, and whether the key is there at all.
func exitCodeOf(t *testing.T, doc []byte) (code any, present bool) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatalf("job JSON: %v\n%s", err, doc)
	}
	code, present = m["exit_code"]
	return code, present
}

// A job whose guest never exited (a timeout, a job that never ran, one
// cancelled) has "exit_code": null on every JSON path that prints a job,
// not 0, which a script testing exit_code == 0 took for a success; a
// completed job's is 0 and a job that exited with a code has that code.
func TestExitCodeIsNullUnlessTheGuestExited(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "spin"), "--timeout", "1s", "--fuel", "4611686018427387904", "--wait", "--json")
	if code, ok := exitCodeOf(t, []byte(r.stdout)); r.code != 1 || !ok || code != nil {
		t.Fatalf("submit --wait --json of a job that timed out: exit_code %v (present %v), want null; %+v", code, ok, r)
	}
	var timedOut jobJSON
	json.Unmarshal([]byte(r.stdout), &timedOut)
	// Its hint says how to fix it, its message what happened.
	if e := timedOut.Error; e == nil || e.Code != "timeout" || e.Hint != "raise it with --timeout" || strings.Contains(e.Message, "--timeout") {
		t.Errorf("timeout error %+v: want the fix in the hint, not the message", e)
	}
	if r := c.cli("job", "get", timedOut.ID, "--json"); r.code != 0 {
		t.Fatalf("get: %+v", r)
	} else if code, ok := exitCodeOf(t, []byte(r.stdout)); !ok || code != nil {
		t.Errorf("job get --json of a job that timed out: exit_code %v (present %v), want null", code, ok)
	}

	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "fail"), "--wait", "--json")
	if code, _ := exitCodeOf(t, []byte(r.stdout)); r.code != 1 || code != float64(3) {
		t.Fatalf("a job that exited with 3: exit_code %v; %+v", code, r)
	}
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "ok", "--wait", "--json")
	if code, _ := exitCodeOf(t, []byte(r.stdout)); r.code != 0 || code != float64(0) {
		t.Fatalf("a completed job: exit_code %v; %+v", code, r)
	}

	// Never ran (no node has the label): null while queued, and once
	// cancelled.
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--constraint", "zone=mars", "--json")
	if code, ok := exitCodeOf(t, []byte(r.stdout)); r.code != 0 || !ok || code != nil {
		t.Fatalf("submit --json of a queued job: exit_code %v; %+v", code, r)
	}
	var queued jobJSON
	json.Unmarshal([]byte(r.stdout), &queued)
	if r := c.cli("job", "cancel", queued.ID); r.code != 0 {
		t.Fatalf("cancel: %+v", r)
	}

	r = c.cli("job", "list", "--json")
	var list struct{ Jobs []json.RawMessage }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Jobs) != 4 {
		t.Fatalf("list: %v %+v", err, r)
	}
	want := map[string]any{"completed": float64(0), "failed/exit_code": float64(3), "failed/timeout": nil, "aborted/aborted": nil}
	for _, doc := range list.Jobs {
		var j jobJSON
		json.Unmarshal(doc, &j)
		key := j.Phase
		if j.Error != nil {
			key += "/" + j.Error.Code
		}
		code, ok := exitCodeOf(t, doc)
		if w, known := want[key]; !known || !ok || code != w {
			t.Errorf("job list --json: a %s job has exit_code %v (present %v), want %v", key, code, ok, w)
		}
	}
}

// The failure line of 'submit --wait' and 'job logs -f' starts a line of
// its own when the job's output ended mid-line (its stderr cut short by
// its bound ran into "job … failed: …").
func TestFailureLineStartsOnItsOwnLine(t *testing.T) {
	c := startNode(t)
	fail := testwasm.Path(t, "fail") // writes 38 bytes to stderr, exits 3
	r := c.cli("job", "submit", "--wasm", fail, "--max-output", "10", "--wait")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "fail: some\njob j-") || !strings.Contains(r.stderr, "failed: stderr exceeded 10 bytes (output_limit); raise it with --max-output") {
		t.Fatalf("submit --wait of a job whose stderr overflowed: %+v; want its stderr, a newline, then the failure line", r)
	}
	id := strings.TrimSpace(c.cli("job", "submit", "--wasm", fail, "--max-output", "10").stdout)
	c.waitTerminal(id)
	r = c.cli("job", "logs", "-f", id)
	if r.code != 1 || r.stderr != "fail: some\njob "+id+" failed (see 'palyra job get "+id+"')\n" {
		t.Fatalf("logs -f of a job whose stderr overflowed: %+v", r)
	}
	// Likewise a stdout cut short (stdout and stderr may be one terminal,
	// or one pipe): "tick 1\ntic", then a newline.
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "ticker"), "--input", "3 1ms", "--max-output", "10", "--wait")
	if r.code != 1 || r.stdout != "tick 1\ntic\n" || !strings.Contains(r.stderr, "stdout exceeded 10 bytes") {
		t.Fatalf("submit --wait of a job whose stdout overflowed: %+v", r)
	}
}

// 'job watch' on a job that ended long ago stamps its line with the job's
// end, not with the time the watch began.
func TestWatchOfAnEndedJobShowsWhenItEnded(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "fail"), "--wait", "--json")
	var j jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.FinishedAt == "" {
		t.Fatalf("submit: %v %+v", err, r)
	}
	finished, err := time.Parse(time.RFC3339Nano, j.FinishedAt)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // now's stamp would differ from the end's
	r = c.cli("job", "watch", j.ID)
	want := watchStamp(finished, time.Now()) + "  failed  attempt 1"
	if r.code != 1 || !strings.HasPrefix(r.stdout, want) && !strings.HasPrefix(r.stdout, finished.UTC().Format("2006-01-02 15:04:05.000")) {
		t.Fatalf("job watch of an ended job: %+v; want its line to start %q", r, want)
	}
}

// A watch line's stamp carries its date when that is not today's.
func TestWatchStamp(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	if got := watchStamp(now.Add(-90*time.Minute), now); got != "08:30:00.000" {
		t.Errorf("today: %q", got)
	}
	if got := watchStamp(now.Add(-11*time.Hour), now); got != "2026-11-27 23:00:00.000" {
		t.Errorf("yesterday: %q", got)
	}
	if got := watchStamp(now.AddDate(-1, 0, 0), now); got != "2025-11-28 10:00:00.000" {
		t.Errorf("a year ago, same day: %q", got)
	}
}

// 'job get' shows a job's limits and the facts a user needs (they were
// in --json only, or nowhere): timeout, memory, fuel budget and use, max
// output, priority, constraints, deadline, the idempotency key, the exit
// code, and when it was placed and started; --json gains the fuel budget,
// max_output_bytes and the idempotency key.
func TestJobGetShowsLimitsAndTimes(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "abc", "--timeout", "2m", "--memory", "32MiB",
		"--max-output", "4MiB", "--priority", "3", "--idempotency-key", "k-1", "--wait", "--json")
	var done jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &done); err != nil || r.code != 0 {
		t.Fatalf("submit: %v %+v", err, r)
	}
	j := c.jobJSON(done.ID)
	if j.Fuel != 10_000_000_000 || j.MaxOutputBytes != 4<<20 || j.IdempotencyKey != "k-1" || j.FuelUsed == 0 {
		t.Fatalf("job get --json: fuel %d max_output_bytes %d idempotency_key %q fuel_used %d", j.Fuel, j.MaxOutputBytes, j.IdempotencyKey, j.FuelUsed)
	}
	r = c.cli("job", "get", j.ID)
	for _, re := range []string{
		`(?m)^limits +timeout 2m0s, memory 32\.0 MiB, fuel 10,000,000,000 \(default\), max output 4\.0 MiB$`,
		`(?m)^fuel used +[0-9,]+ of 10,000,000,000$`,
		`(?m)^priority +3$`,
		`(?m)^idempotency key +k-1$`,
		`(?m)^placed +` + regexp.QuoteMeta(j.PlacedAt) + `$`,
		`(?m)^started +` + regexp.QuoteMeta(j.StartedAt) + `$`,
		`(?m)^exit code +0$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("job get of a completed job lacks %s:\n%s", re, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "constraints") || strings.Contains(r.stdout, "deadline") {
		t.Errorf("job get shows settings the job does not have:\n%s", r.stdout)
	}

	// A job that never ran: its constraints and deadline, an explicit
	// fuel budget, no exit code, no start.
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--constraint", "zone=mars", "--constraint", "disk=ssd",
		"--deadline", "1h", "--fuel", "5000", "--json")
	var q jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &q); err != nil {
		t.Fatalf("submit: %v %+v", err, r)
	}
	r = c.cli("job", "get", q.ID)
	for _, re := range []string{
		`(?m)^limits +timeout 30s, memory 64\.0 MiB, fuel 5,000, max output 1\.0 MiB$`,
		`(?m)^constraints +disk=ssd, zone=mars$`,
		`(?m)^deadline +\d{4}-`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("job get of a queued job lacks %s:\n%s", re, r.stdout)
		}
	}
	for _, no := range []string{"exit code", "started", "fuel used"} {
		if strings.Contains(r.stdout, no) {
			t.Errorf("job get of a job that never ran shows %q:\n%s", no, r.stdout)
		}
	}
}

// 'job logs' of a job that has not started says so (it printed nothing,
// exit 0), and 'job logs -f' says why it waits (it hung silently); on a
// job no node can run, -f gives up as 'job submit --wait' does, naming
// the reason and what to do (it followed for ever).
func TestJobLogsOfAJobThatHasNotStarted(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--constraint", "zone=mars")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	const reason = "no eligible node offers wasm capacity"
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(c.jobJSON(id).PendingReason, reason) {
		if time.Now().After(deadline) {
			t.Fatalf("no pending reason: %+v", c.jobJSON(id))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r = c.cli("job", "logs", id)
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "job "+id+" is queued: no output yet; pending: "+reason) {
		t.Fatalf("logs of a queued job: %+v; want a note saying it has not run and why", r)
	}

	var out, errb testbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"palyra", "--data-dir", c.dir, "--addr", c.node.Addr(), "job", "logs", "-f", id}, strings.NewReader(""), &out, &errb)
	}()
	deadline = time.Now().Add(20 * time.Second)
	for !strings.Contains(errb.String(), reason) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // printed once, not over and over
	cancel()
	code := <-done
	if got := errb.String(); strings.Count(got, "job "+id+" waiting: "+reason) != 1 || code != exitInterrupted {
		t.Fatalf("logs -f of a job no node can run: exit %d, stderr %q; want its pending reason once", code, got)
	}

	r = c.cli("job", "logs", "-f", id)
	if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "job "+id+" waiting: "+reason) != 1 ||
		!strings.Contains(r.stderr, "job "+id+" is still queued: "+reason) || !strings.Contains(r.stderr, "cancel it with 'palyra job cancel "+id+"'") {
		t.Fatalf("logs -f of a job no node can run, left alone: %+v; want it to give up as submit --wait does, exit 1, with the reason and how to cancel", r)
	}
	if j := c.jobJSON(id); j.Phase != "queued" {
		t.Fatalf("logs -f gave up on job %s, which is now %s; want it left queued", id, j.Phase)
	}
}
