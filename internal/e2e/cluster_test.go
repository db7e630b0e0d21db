package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
)

// Three node processes on loopback form a cluster by pairing; every node
// reports the same three alive voters and the same leader. SIGKILL the
// leader: the survivors elect a new one, a job submitted to a survivor
// completes, and the killed node, restarted with `node start` on its data
// dir, rejoins by itself.
func TestThreeNodeClusterSurvivesLeaderSIGKILL(t *testing.T) {
	t.Parallel()
	reverse := testwasm.Path(t, "reverse")
	c := newLoopbackCluster(t, 3)
	c.form()
	views := c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))
	leader := c.byID(leaderOf(views))
	t.Logf("formed: leader %s (%s)", leader.id, leader.name)

	// Every node's machine runs the CLI with its own data dir: a joined
	// node got a local operator credential when it paired.
	for _, m := range c.members[1:] {
		if r := runData(m.dataDir, m.addr, "nodes"); r.code != 0 || strings.Count(r.stdout, "alive") < 3 {
			t.Fatalf("the CLI on %s's machine: %+v", m.name, r)
		}
	}
	// That credential is a device like any other: revoked, it stops
	// working, and the node itself carries on.
	revoked := c.members[2]
	opCred, err := identity.LoadCredential(node.Layout{Dir: revoked.dataDir}.OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	if r := c.members[0].cli("device", "revoke", opCred.Principal.ID); r.code != 0 {
		t.Fatalf("revoke %s's local operator: %+v", revoked.name, r)
	}
	waitUntil(t, revoked.name+"'s local operator refused", 30*time.Second, func() error {
		if r := runData(revoked.dataDir, revoked.addr, "nodes"); r.code == 0 {
			return fmt.Errorf("still accepted")
		}
		return nil
	})

	// Jobs submitted through each node complete.
	for i, m := range c.members {
		in := fmt.Sprintf("via-%d", i)
		if j, r := m.runJob(reverse, in, time.Minute); j.Phase != "completed" || j.Output != reverseString(in) {
			t.Fatalf("job via %s: %+v %+v", m.name, j, r)
		}
	}

	leader.kill()
	survivors := c.running()
	views = c.waitViews("a new leader among the survivors", 60*time.Second, survivors, func(views []view) error {
		for _, v := range views {
			if _, _, l := v.summary(); l == "" || l == leader.id {
				return fmt.Errorf("%s still reports leader %q", v.ServedBy, l)
			}
		}
		return agree(2, 3)(views)
	})
	t.Logf("new leader %s", leaderOf(views))

	j, r := survivors[0].runJob(reverse, "after failover", time.Minute)
	if j.Phase != "completed" || j.Output != reverseString("after failover") {
		t.Fatalf("job on a survivor after the leader's SIGKILL: %+v %+v", j, r)
	}

	leader.startNode()
	leader.waitUp(90 * time.Second)
	c.waitViews("the restarted node alive again everywhere", 90*time.Second, c.members, agree(3, 3))
}

// Four nodes: three voters and a spare. SIGKILL a voter: the spare is
// promoted, and after the dead-server grace period the dead node is
// removed from raft, leaving three alive voters.
func TestVoterSIGKILLPromotesTheSpare(t *testing.T) {
	t.Parallel()
	c := newLoopbackCluster(t, 4)
	c.form()
	views := c.waitViews("4 alive, 3 voters, one leader on every node", 90*time.Second, c.members, agree(4, 3))
	var victim, spare *member
	for _, n := range views[0].Nodes {
		switch {
		case !n.Voter:
			spare = c.byID(n.ID)
		case !n.Leader && victim == nil:
			victim = c.byID(n.ID)
		}
	}
	if victim == nil || spare == nil {
		t.Fatalf("want a follower voter and a non-voter in %s", views[0])
	}
	t.Logf("killing voter %s (%s); spare %s (%s)", victim.id, victim.name, spare.id, spare.name)
	victim.kill()

	survivors := c.running()
	c.waitViews("the spare promoted", 60*time.Second, survivors, func(views []view) error {
		for _, v := range views {
			if n, _ := v.node(spare.id); !n.Voter {
				return fmt.Errorf("%s: spare %s is not a voter yet", v.ServedBy, spare.id)
			}
			if n, _ := v.node(victim.id); n.State == "alive" {
				return fmt.Errorf("%s: killed %s still alive", v.ServedBy, victim.id)
			}
		}
		return nil
	})
	// The production grace period before a dead server is removed is a minute.
	c.waitViews("the dead voter removed from raft, 3 alive voters", 150*time.Second, survivors, func(views []view) error {
		for _, v := range views {
			if n, ok := v.node(victim.id); ok && (n.InRaft || n.Voter) {
				return fmt.Errorf("%s: dead %s still in raft (voter=%v)", v.ServedBy, victim.id, n.Voter)
			}
			voters := 0
			for _, n := range v.Nodes {
				if n.Voter {
					voters++
					if n.State != "alive" {
						return fmt.Errorf("%s: voter %s is %s", v.ServedBy, n.ID, n.State)
					}
				}
			}
			if voters != 3 {
				return fmt.Errorf("%s: %d voters, want 3", v.ServedBy, voters)
			}
		}
		return nil
	})
}

func reverseString(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// contains reports whether s holds every part.
func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
