package cluster

import (
	"fmt"
	"testing"
	"time"
)

// (d) With 4 nodes and TargetVoters 3 there are 3 voters and 1 non-voter.
// When a voter dies the non-voter is promoted (back to 3 voters) and the
// dead one is removed from raft after the grace period.
func TestSpareIsPromotedWhenVoterDies(t *testing.T) {
	nodes := formCluster(t, 4, 3)
	eventually(t, 20*time.Second, "3 voters and 1 non-voter", func() error { return converged(nodes, 3, 1) })
	leader := leaderOf(t, nodes)
	var victim, spare *tnode
	v := viewOf(leader)
	for _, n := range others(nodes, leader) {
		switch m := v.byID[n.id]; {
		case m.Voter && victim == nil:
			victim = n
		case !m.Voter:
			spare = n
		}
	}
	if victim == nil || spare == nil {
		t.Fatalf("want a follower voter and a non-voter, got view %+v", v.byID)
	}

	killed := time.Now()
	victim.stop()
	rest := others(nodes, victim)
	var detect, promoted time.Duration
	eventually(t, 30*time.Second, "the spare promoted and the dead voter removed", func() error {
		if detect == 0 && allSee(rest, func(n *tnode) bool { return viewOf(n).byID[victim.id].State == StateDead }) {
			detect = time.Since(killed)
		}
		if promoted == 0 && allSee(rest, func(n *tnode) bool { return viewOf(n).byID[spare.id].Voter }) {
			promoted = time.Since(killed)
		}
		if err := converged(rest, 3, 0); err != nil {
			return err
		}
		for _, n := range rest {
			if m := viewOf(n).byID[victim.id]; m.InRaft || m.State != StateDead {
				return fmt.Errorf("%s still sees the dead voter as %+v", n.id, m)
			}
		}
		return nil
	})
	t.Logf("voter killed: gossip marked it dead on all survivors after %v; spare promoted after %v", detect, promoted)

	if _, err := spare.cl.Apply(ctxFor(t, 10*time.Second), submit("after-promotion")); err != nil {
		t.Fatalf("Apply after promotion: %v", err)
	}
}

// (g) A leaving leader hands leadership over first, is removed from raft
// and gossip reports it as left; with a spare available the cluster is
// back to 3 voters.
func TestLeaderLeaveHandsOverAndKeepsVoters(t *testing.T) {
	nodes := formCluster(t, 4, 3)
	eventually(t, 20*time.Second, "3 voters and 1 non-voter", func() error { return converged(nodes, 3, 1) })
	leader := leaderOf(t, nodes)
	rest := others(nodes, leader)

	if err := leader.cl.Leave(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if leader.store.IsLeader() {
		t.Fatal("the leaving node is still the leader after Leave")
	}
	if _, id := rest[0].cl.Leader(); id == leader.id {
		t.Fatalf("%s still follows the node that left", rest[0].id)
	}
	eventually(t, 30*time.Second, "3 voters among the remaining nodes, the leaver gone", func() error {
		if err := converged(rest, 3, 0); err != nil {
			return err
		}
		for _, n := range rest {
			if m := viewOf(n).byID[leader.id]; m.InRaft || m.State != StateLeft {
				return fmt.Errorf("%s sees the leaver as %+v, want left and out of raft", n.id, m)
			}
		}
		return nil
	})
	if _, err := rest[0].cl.Apply(ctxFor(t, 10*time.Second), submit("after-leave")); err != nil {
		t.Fatalf("Apply after the leader left: %v", err)
	}
	if err := leader.cl.Join(ctxFor(t, time.Second), []string{rest[0].addr}); err == nil {
		t.Fatal("Join after Leave succeeded; want an error saying to start a new Cluster")
	}
	if err := leader.cl.Leave(ctxFor(t, time.Second)); err != nil {
		t.Fatalf("second Leave: %v, want nil (idempotent)", err)
	}
}
