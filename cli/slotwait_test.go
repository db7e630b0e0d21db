package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	palyrav1 "github.com/palyra-mesh/palyra/proto/palyrav1"
)

// 'job logs' of a job its worker holds waiting for a slot says so, not
// that the job "is still running" with no output (a trial); 'job list'
// shows no node for a job queued again.
func TestJobLogsOfAJobWaitingForASlot(t *testing.T) {
	dir := t.TempDir()
	n, err := node.Start(context.Background(), node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 1, BrowserSlots: -1, Prefetch: 4,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := &cluster{t: t, node: n, dir: dir}
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
