package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testbuf"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	palyrav1 "github.com/palyra-mesh/palyra/proto/palyrav1"
)

// oneSlotNode starts a one-node cluster with one wasm slot and prefetch,
// so a second job waits on its worker for the first one's slot.
func oneSlotNode(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	n, err := node.Start(context.Background(), node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 1, BrowserSlots: -1, Prefetch: 4,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return &cluster{t: t, node: n, dir: dir}
}

// 'job logs' of a job its worker holds waiting for a slot says so, not
// that the job "is still running" with no output (a trial); 'job list'
// shows no node for a job queued again.
func TestJobLogsOfAJobWaitingForASlot(t *testing.T) {
	c := oneSlotNode(t)
	n := c.node
	sleep := testwasm.Path(t, "sleep")
	var ids []string
	for range 2 {
		r := c.cli("job", "submit", "--wasm", sleep, "--input", "10s")
		if r.code != 0 {
			t.Fatalf("submit: %+v", r)
		}
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var j struct {
			WaitingForSlot bool `json:"waiting_for_slot"`
		}
		if r := c.cli("job", "get", ids[1], "--json"); r.code == 0 && json.Unmarshal([]byte(r.stdout), &j) == nil && j.WaitingForSlot {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second job never waited on its worker for a slot")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := c.cli("job", "logs", ids[1])
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "is placed on "+n.ID()+" and waits there for a free slot: no output yet") {
		t.Fatalf("job logs of a job waiting for a slot: %+v", r)
	}
	if r := c.cli("job", "cancel", ids[0], ids[1]); r.code != 0 {
		t.Fatalf("cancel: %+v", r)
	}
	if r := c.cli("job", "list"); r.code != 0 || !regexp.MustCompile(`(?m)^`+ids[0]+` +wasm +aborted +1 +`+n.ID()).MatchString(r.stdout) {
		t.Fatalf("job list: %+v", r)
	}
}

// A job queued again lists no node (its last attempt's is in 'job get').
func TestListNode(t *testing.T) {
	for _, tc := range []struct {
		phase palyrav1.JobPhase
		node  string
		want  string
	}{
		{palyrav1.JobPhase_JOB_PHASE_QUEUED, "n-a", "-"},
		{palyrav1.JobPhase_JOB_PHASE_QUEUED, "", "-"},
		{palyrav1.JobPhase_JOB_PHASE_RUNNING, "n-a", "n-a"},
		{palyrav1.JobPhase_JOB_PHASE_COMPLETED, "n-a", "n-a"},
		{palyrav1.JobPhase_JOB_PHASE_ABORTED, "", "-"},
	} {
		if got := listNode(&palyrav1.Job{Phase: tc.phase, NodeId: tc.node}); got != tc.want {
			t.Errorf("%s on %q: NODE %q, want %q", tc.phase, tc.node, got, tc.want)
		}
	}
}

// 'job logs -f' of a job its worker holds until a slot frees says so on
// stderr while it waits, then follows the output once the job starts.
func TestJobLogsFollowSaysAJobWaitsForASlot(t *testing.T) {
	c := oneSlotNode(t)
	n, dir := c.node, c.dir
	sleep := testwasm.Path(t, "sleep")
	var ids []string
	for _, d := range []string{"30s", "1ms"} {
		r := c.cli("job", "submit", "--wasm", sleep, "--input", d)
		if r.code != 0 {
			t.Fatalf("submit: %+v", r)
		}
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	var out bytes.Buffer
	var errb testbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"palyra", "--data-dir", dir, "--addr", n.Addr(), "job", "logs", "-f", ids[1]}, strings.NewReader(""), &out, &errb)
	}()
	want := "job " + ids[1] + " is placed on " + n.ID() + " and waits there for a free slot (attempt 1); its output follows once it starts"
	for !strings.Contains(errb.String(), want) {
		select {
		case code := <-done:
			t.Fatalf("job logs -f ended (%d) before it said the job waits for a slot: stdout %q stderr %q", code, out.String(), errb.String())
		case <-ctx.Done():
			t.Fatalf("job logs -f never said the job waits for a slot: stderr %q", errb.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if r := c.cli("job", "cancel", ids[0]); r.code != 0 {
		t.Fatalf("cancel: %+v", r)
	}
	select {
	case code := <-done:
		if code != 0 || out.String() != "slept 1ms" {
			t.Fatalf("job logs -f after the slot freed: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
		}
	case <-ctx.Done():
		t.Fatalf("job logs -f did not end with the job: stderr %q", errb.String())
	}
}
