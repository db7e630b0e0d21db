package node_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A drained node starts nothing more: a job placed on it ahead of its
// slots, still waiting for one, goes back to the queue (to run elsewhere),
// while the run that has its slot finishes there (a fault trial saw a
// drained node start its waiting jobs one by one as slots freed). Made
// eligible again, the node takes the job back.
func TestDrainHandsBackWhatWaitsForASlot(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1, Prefetch: 4})
	op := operator(t, n, n.Addr())
	get := func(id string) *palyrav1.Job { return getJob(t, op, id) }
	first, second := submitSleep(t, op, "10s"), submitSleep(t, op, "10s")
	waitFor(t, "the first job running, the second waiting for the slot", 30*time.Second, func() bool {
		a, b := get(first), get(second)
		return a.RunStartedAtMs > 0 && b.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && b.WaitingForSlot
	})
	if _, err := op.Node.SetSchedulable(callCtx(t), connect.NewRequest(&palyrav1.SetSchedulableRequest{NodeId: n.ID(), Drain: true})); err != nil {
		t.Fatal(op.Explain(err))
	}
	var b *palyrav1.Job
	waitFor(t, "the waiting job back in the queue", 30*time.Second, func() bool {
		b = get(second)
		return b.Phase == palyrav1.JobPhase_JOB_PHASE_QUEUED
	})
	if len(b.EarlierAttempts) != 1 || b.EarlierAttempts[0].Code != "requeued" || !strings.Contains(b.EarlierAttempts[0].Reason, "draining") {
		t.Errorf("the handed-back job's attempts: %+v; want one, requeued because the node drains", b.EarlierAttempts)
	}
	if a := waitCompleted(t, op, first); a.Attempt != 1 {
		t.Errorf("the running job moved (attempt %d): a drain without a deadline lets it finish", a.Attempt)
	}
	// Nothing else may take it: it stays queued while the node drains.
	time.Sleep(500 * time.Millisecond)
	if b = get(second); b.Phase != palyrav1.JobPhase_JOB_PHASE_QUEUED {
		t.Fatalf("the handed-back job is %s on a cluster whose only node drains", b.Phase)
	}
	if _, err := op.Node.SetSchedulable(callCtx(t), connect.NewRequest(&palyrav1.SetSchedulableRequest{NodeId: n.ID(), Eligible: true})); err != nil {
		t.Fatal(op.Explain(err))
	}
	if b = waitCompleted(t, op, second); b.Attempt != 2 {
		t.Errorf("the handed-back job completed at attempt %d, want 2", b.Attempt)
	}
}
