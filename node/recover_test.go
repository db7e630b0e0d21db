package node_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/internal/testbuf"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A node restarted on its data dir takes no work before it has recovered
// what its previous process left. It used to gossip its slots as soon as
// it joined, so the leader placed queued jobs on it before Recover ran,
// and Recover took those fresh placements for leftovers and requeued them:
// every such job ran a second time (attempt 2).
func TestRestartedNodeTakesNoWorkBeforeRecover(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	second := join(t, op, first.Addr(), t.TempDir())
	third := join(t, op, first.Addr(), t.TempDir())
	waitFor(t, "3 alive voters and one leader", time.Minute, func() bool { ok, _ := healthy(first, 3, 3); return ok })

	// Only the third node may take work, and it is down: jobs queue.
	for _, n := range []*node.Node{first, second} {
		if _, err := op.Node.SetSchedulable(callCtx(t), connect.NewRequest(&palyrav1.SetSchedulableRequest{NodeId: n.ID()})); err != nil {
			t.Fatal(op.Explain(err))
		}
	}
	dir := third.Layout().Dir
	third.Close()
	// Until the others see it gone, the leader may still place on it (a
	// job then runs on no one, and the restarted node's Recover rightly
	// requeues it as left by its previous process).
	waitFor(t, "the third node seen gone", time.Minute, func() bool {
		a, _ := healthy(first, 2, 3)
		b, _ := healthy(second, 2, 3)
		return a && b
	})
	var ids []string
	for i := range 24 {
		ids = append(ids, submit(t, op, fmt.Sprintf("queued-%d", i)))
	}
	for _, id := range ids {
		resp, err := op.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		if resp.Msg.Job.Phase != palyrav1.JobPhase_JOB_PHASE_QUEUED {
			t.Fatalf("job %s is %s with no eligible node up; want queued", id, resp.Msg.Job.Phase.WireName())
		}
	}

	// Its log says what Recover requeued: here nothing, since no job ran
	// on it before it stopped. (Each job's attempt is no measure: on a
	// loaded machine the failure detector may rightly requeue a job of a
	// node that stalls while it starts, as a fresh-clone CI saw once.)
	var logs testbuf.Buffer
	start(t, node.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, id := range ids {
		j := waitCompleted(t, op, id)
		if j.Attempt != 1 {
			t.Logf("job %s completed on attempt %d", id, j.Attempt)
		}
	}
	if strings.Contains(logs.String(), "requeued job left running by a previous process") {
		t.Fatalf("the restarted node's Recover requeued jobs placed on it after it started (they ran twice):\n%s", logs.String())
	}
}
