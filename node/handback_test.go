package node_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/internal/testbuf"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A node stopped cleanly (SIGTERM, SIGINT: Close) first gossips that it
// takes no more work, then, once its runs have stopped, queues the jobs it
// was running again itself, so they run on the others at once instead of
// once the cluster has noticed it gone; every job still completes.
func TestStoppingNodeHandsItsJobsBack(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	var logs testbuf.Buffer
	second := joinWith(t, op, first.Addr(), node.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	joinWith(t, op, first.Addr(), node.Config{})
	waitFor(t, "3 alive voters and a leader", time.Minute, func() bool { ok, _ := healthy(first, 3, 3); return ok })

	sleep := testwasm.Build(t, "sleep")
	var ids []string
	onSecond := func() []string {
		var out []string
		for _, id := range ids {
			if j, ok := first.StateForTest().Job(id); ok && j.Phase == consensus.PhaseRunning && j.NodeID == second.ID() {
				out = append(out, id)
			}
		}
		return out
	}
	// Jobs until some run on the second node (the scheduler spreads them).
	for i := 0; i < 24 && len(onSecond()) == 0; i++ {
		resp, err := op.Jobs.SubmitJob(callCtx(t), connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: sleep, Input: []byte("4s")}))
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		ids = append(ids, resp.Msg.Job.Id)
		time.Sleep(50 * time.Millisecond)
	}
	waitFor(t, "a job running on the second node", time.Minute, func() bool { return len(onSecond()) > 0 })
	handed := onSecond()

	second.Close()
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "queued this node's running jobs again") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("the stopping node did not queue its %d running jobs again\n%s", len(handed), logs.String())
	}
	for _, id := range ids {
		j := waitCompleted(t, op, id)
		if !slices.Contains(handed, id) {
			continue
		}
		if j.NodeId == second.ID() {
			t.Errorf("job %s, handed back, completed on the stopped node", id)
		}
		// Its story says where the first attempt went and why it ended.
		e := j.EarlierAttempts
		if len(e) == 0 || e[0].NodeId != second.ID() || e[0].Code != "requeued" || e[0].Reason != "node "+second.ID()+" stopped" || e[0].EndedAtMs < e[0].PlacedAtMs || e[0].PlacedAtMs == 0 {
			t.Errorf("job %s, handed back: earlier attempts %v", id, e)
		}
	}
}
