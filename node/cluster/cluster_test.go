package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// (a) three nodes form one cluster: all alive, three voters, one leader
// everywhere; (b) a follower's Apply is forwarded and committed, and a
// follower's VerifyRead sees the leader's latest write.
func TestThreeNodesFormAndForward(t *testing.T) {
	n1 := newNode(t, 3)
	n1.start(true)
	events := n1.cl.Changes()
	n2, n3 := newNode(t, 3), newNode(t, 3)
	n2.meta = Meta{Labels: map[string]string{"zone": "b"}, Capacity: map[string]int{"wasm": 4}, Version: "1.2.3"}
	n2.start(false)
	n3.start(false)
	n2.join(n1)
	n3.join(n1)
	nodes := []*tnode{n1, n2, n3}
	took := eventually(t, 20*time.Second, "3 alive voters and one leader everywhere", func() error { return converged(nodes, 3, 0) })
	t.Logf("converged %v after the last join", took)

	select {
	case <-events:
	default:
		t.Fatal("no Changes event on the first node while two nodes joined")
	}
	if m := viewOf(n1).byID[n2.id]; m.Labels["zone"] != "b" || m.Capacity["wasm"] != 4 || m.Version != "1.2.3" {
		t.Fatalf("n1 sees n2's meta as %+v, want zone=b wasm=4 version 1.2.3", m)
	}

	if err := n2.cl.SetMeta(ctxFor(t, 5*time.Second), Meta{Capacity: map[string]int{"wasm": 1}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "n1 sees n2's new capacity", func() error {
		if m := viewOf(n1).byID[n2.id]; m.Capacity["wasm"] != 1 {
			return fmt.Errorf("n2 is %+v", m)
		}
		return nil
	})

	leader := leaderOf(t, nodes)
	follower := others(nodes, leader)[0]
	job, err := follower.cl.Apply(ctxFor(t, 10*time.Second), submit("job-1"))
	if err != nil {
		t.Fatalf("Apply on follower: %v", err)
	}
	if job.ID != "job-1" || job.Phase != consensus.PhaseQueued || job.CommitIndex == 0 {
		t.Fatalf("forwarded apply returned %+v, want job-1 queued with a commit index", job)
	}
	// A resubmission of the same job (a retry) replays it; the same id
	// with other content is refused by the FSM, through the follower.
	if again, err := follower.cl.Apply(ctxFor(t, 10*time.Second), submit("job-1")); err != nil || again.CommitIndex != job.CommitIndex {
		t.Fatalf("resubmit via follower: got %+v, %v; want the original job", again, err)
	}
	other := submit("job-1")
	other.GetSubmitJob().Job.Input = []byte("other content")
	if _, err := follower.cl.Apply(ctxFor(t, 10*time.Second), other); !errors.Is(err, consensus.ErrConflict) {
		t.Fatalf("conflicting submit via follower: got %v, want the FSM's conflict error", err)
	}

	// Linearizable read on a follower: a write acknowledged by the leader
	// is visible right after VerifyRead, with no polling.
	for i, reader := range others(nodes, leader) {
		id := []string{"job-2", "job-3"}[i]
		if _, err := leader.cl.Apply(ctxFor(t, 10*time.Second), submit(id)); err != nil {
			t.Fatalf("Apply on leader: %v", err)
		}
		if err := reader.cl.VerifyRead(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("VerifyRead on follower: %v", err)
		}
		if _, ok := reader.store.State().Job(id); !ok {
			t.Fatalf("follower %s does not see %s after VerifyRead", reader.id, id)
		}
	}
	if err := leader.cl.VerifyRead(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("VerifyRead on leader: %v", err)
	}
}

// The worker's control interface (node/worker.Control) is satisfied by a
// Cluster, so node can hand it over in place of the Store.
var _ interface {
	State() *consensus.State
	Apply(context.Context, *raftpb.Command) (consensus.Job, error)
} = (*Cluster)(nil)
