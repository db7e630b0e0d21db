package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
)

// lostLeadership is what the store answers a VerifyLeader or Barrier whose
// leader stepped down before a quorum confirmed it (raft.ErrLeadershipLost).
var lostLeadership = &consensus.Error{Code: consensus.ErrUnknownOutcome.Code,
	Message: "leadership was lost while committing; the change may or may not have been committed"}

// failFirst makes n's leadership checks fail with err the first times
// calls, then pass through to the store. It returns the number of checks
// made so far.
func failFirst(n *tnode, times int, err error) *atomic.Int32 {
	var calls atomic.Int32
	n.cl.setVerifyLeader(func(ctx context.Context) error {
		if calls.Add(1) <= int32(times) {
			return err
		}
		return n.store.VerifyLeader(ctx)
	})
	return &calls
}

// A read changes nothing, so a leadership check that fails because the
// leader stepped down (raft's ErrLeadershipLost, which the store reports as
// an unknown-outcome write error) or because it is no longer the leader is
// retried within the read's deadline, on the leader and through a
// follower's read index, never surfaced as a write's unknown outcome.
func TestVerifyReadRetriesLostLeadership(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	leader := leaderOf(t, nodes)
	follower := others(nodes, leader)[0]
	if _, err := leader.cl.Apply(ctxFor(t, 10*time.Second), submit("before-read")); err != nil {
		t.Fatalf("Apply: %v", err)
	}

	for _, tc := range []struct {
		name string
		err  error
	}{
		{"leadership lost", lostLeadership},
		{"not leader", &consensus.Error{Code: consensus.ErrNotLeader.Code, Message: "not the leader"}},
	} {
		for _, reader := range []*tnode{leader, follower} {
			calls := failFirst(leader, 2, tc.err)
			if err := reader.cl.VerifyRead(ctxFor(t, 15*time.Second)); err != nil {
				t.Fatalf("%s, read on %s: VerifyRead = %v, want nil after retrying", tc.name, roleOf(reader, leader), err)
			}
			if got := calls.Load(); got < 3 {
				t.Fatalf("%s, read on %s: %d leadership checks, want the 2 failures and a success", tc.name, roleOf(reader, leader), got)
			}
			if _, ok := reader.store.State().Job("before-read"); !ok {
				t.Fatalf("%s: %s does not see the acknowledged write after VerifyRead", tc.name, roleOf(reader, leader))
			}
		}
	}
	leader.cl.setVerifyLeader(nil)

	// The retry is bounded by the read's deadline: a leadership check that
	// never succeeds fails the read when its context ends.
	failFirst(leader, 1<<30, lostLeadership)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := leader.cl.VerifyRead(ctx)
	if err == nil {
		t.Fatal("VerifyRead succeeded although every leadership check failed")
	}
	if errors.Is(err, consensus.ErrUnknownOutcome) {
		t.Fatalf("VerifyRead = %v (code unavailable: unknown outcome); a read has no outcome to be unknown", err)
	}
	leader.cl.setVerifyLeader(nil)
}

func roleOf(n, leader *tnode) string {
	if n == leader {
		return "the leader"
	}
	return "a follower"
}

// Linearizable reads on every node keep succeeding while leadership moves
// around the cluster: a read caught by a step-down goes round again.
func TestVerifyReadAcrossLeadershipTransfers(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		wg.Add(1)
		go func(n *tnode) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := n.cl.VerifyRead(ctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("VerifyRead on %s: %w", n.id, err)
					return
				}
				reads.Add(1)
			}
		}(n)
	}
	const transfers = 4
	for i := 0; i < transfers; i++ {
		var old *tnode
		eventually(t, 20*time.Second, "a leader", func() error {
			for _, n := range nodes {
				if n.store.IsLeader() && n.cl.leaderReady.Load() {
					old = n
					return nil
				}
			}
			return errors.New("no ready leader")
		})
		before := reads.Load()
		eventually(t, 20*time.Second, "reads under this leader", func() error {
			if reads.Load() < before+3 {
				return errors.New("no reads yet")
			}
			return nil
		})
		if err := old.store.Raft().LeadershipTransfer().Error(); err != nil {
			t.Logf("transfer %d: %v", i, err)
		}
		eventually(t, 20*time.Second, "a new leader", func() error {
			for _, n := range nodes {
				if n != old && n.store.IsLeader() {
					return nil
				}
			}
			return errors.New("old leader still leads")
		})
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d linearizable reads across %d leadership transfers", reads.Load(), transfers)
}
