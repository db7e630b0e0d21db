package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
)

// (c) Killing the leader elects a new one among the survivors, Apply via a
// survivor works, and the old leader restarted on its raft dir and address
// rejoins by itself (no Join) and catches up.
func TestLeaderFailoverAndRestart(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	old := leaderOf(t, nodes)
	survivors := others(nodes, old)

	killed := time.Now()
	old.stop()
	// Poll both at once so each figure is when it first held.
	var failover, detect time.Duration
	eventually(t, 20*time.Second, "a new leader among the survivors, and the old one seen dead", func() error {
		if failover == 0 && allSee(survivors, func(n *tnode) bool { _, id := n.cl.Leader(); return id != "" && id != old.id }) {
			failover = time.Since(killed)
		}
		if detect == 0 && allSee(survivors, func(n *tnode) bool { return viewOf(n).byID[old.id].State == StateDead }) {
			detect = time.Since(killed)
		}
		if failover == 0 || detect == 0 {
			return fmt.Errorf("failover after %v, detection after %v (0 = not yet)", failover, detect)
		}
		return nil
	})
	t.Logf("leader killed: new leader known on both survivors after %v; gossip marked it dead on both after %v", failover, detect)

	if _, err := survivors[0].cl.Apply(ctxFor(t, 15*time.Second), submit("after-failover")); err != nil {
		t.Fatalf("Apply via survivor after failover: %v", err)
	}

	old.start(false) // same dir and address; no Join
	eventually(t, 30*time.Second, "the restarted node rejoins and the cluster converges", func() error { return converged(nodes, 3, 0) })
	eventually(t, 10*time.Second, "the restarted node applies the write it missed", func() error {
		if _, ok := old.store.State().Job("after-failover"); !ok {
			return errors.New("job missing")
		}
		return nil
	})
}

// (e) A node cut off from the majority cannot commit: Apply fails with
// code no_quorum naming the last leader it saw. After healing it converges
// to the same state.
func TestPartitionedNodeHasNoQuorumThenHeals(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	cut := others(nodes, leaderOf(t, nodes))[0]
	majority := others(nodes, cut)

	away := map[string]bool{majority[0].addr: true, majority[1].addr: true}
	cut.tr.SetFault(func(remote string) bool { return away[remote] })
	_, err := cut.cl.Apply(ctxFor(t, 15*time.Second), submit("from-minority"))
	var ce *consensus.Error
	if !errors.As(err, &ce) || !errors.Is(err, consensus.ErrNoQuorum) {
		t.Fatalf("Apply on the cut-off node: got %v, want a no_quorum *consensus.Error", err)
	}
	// It names the last leader the cut-off node saw (leadership may have
	// moved under load before the cut, so any member may be named).
	named := false
	for _, n := range nodes {
		named = named || strings.Contains(ce.Message, fmt.Sprintf("no quorum: cannot commit (last leader seen: %s at %s)", n.id, n.addr))
	}
	if !named || ce.Hint == "" {
		t.Fatalf("no_quorum error %q (hint %q) should name the last leader seen and give a hint", ce.Message, ce.Hint)
	}
	// A read there says it is a read; not how to read anyway (--stale),
	// which only the API's reads that can be stale add.
	if err := cut.cl.VerifyRead(ctxFor(t, 15*time.Second)); !errors.As(err, &ce) || !errors.Is(err, consensus.ErrNoQuorum) ||
		!strings.Contains(ce.Message, "cannot confirm that this node's replica is current for a read") || strings.Contains(ce.Hint, "--stale") {
		t.Fatalf("VerifyRead on the cut-off node: %v", err)
	}
	if _, err := majority[0].cl.Apply(ctxFor(t, 15*time.Second), submit("from-majority")); err != nil {
		t.Fatalf("Apply on the majority side during the partition: %v", err)
	}

	cut.tr.SetFault(nil)
	eventually(t, 30*time.Second, "the healed node converges", func() error { return converged(nodes, 3, 0) })
	eventually(t, 10*time.Second, "the healed node has the majority's state", func() error {
		if _, ok := cut.store.State().Job("from-majority"); !ok {
			return errors.New("majority's job missing")
		}
		if _, ok := cut.store.State().Job("from-minority"); ok {
			return errors.New("the minority's refused write appeared")
		}
		if a, b := len(cut.store.State().Jobs(consensus.JobFilter{})), len(leaderOf(t, nodes).store.State().Jobs(consensus.JobFilter{})); a != b {
			return fmt.Errorf("healed node has %d jobs, leader %d", a, b)
		}
		return nil
	})
}

// allSee reports whether cond holds on every node.
func allSee(nodes []*tnode, cond func(*tnode) bool) bool {
	for _, n := range nodes {
		if !cond(n) {
			return false
		}
	}
	return true
}
