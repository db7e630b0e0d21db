package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// `palyra node remove`: a live node is refused without --force, the
// leader always; with --force the node is cut off, out of raft, and the
// job it ran runs again on another node; a dead node is removed without
// --force. Four nodes, so three remain after the first removal.
func TestNodeRemove(t *testing.T) {
	t.Parallel()
	sleep := testwasm.Path(t, "sleep")
	c := newLoopbackCluster(t, 4)
	first := c.members[0]
	first.startNode()
	first.waitUp(60 * time.Second)
	for i, m := range c.members[1:] {
		var extra []string
		if i < 2 { // n2 and n3 may run the test's job
			extra = []string{"--label", "role=doomed"}
		}
		m.joinNode(c.pairCode(first), first.addr, extra...)
		m.waitUp(90 * time.Second)
	}
	views := c.waitViews("4 alive, 3 voters, one leader on every node", 90*time.Second, c.members, agree(4, 3))
	leader := c.byID(leaderOf(views))

	r := first.cli("job", "submit", "--wasm", sleep, "--input", "8s", "--constraint", "role=doomed")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	var j job
	waitUntil(t, "the job running", time.Minute, func() error {
		g := first.cli("job", "get", id, "--json")
		if g.code != 0 || json.Unmarshal([]byte(g.stdout), &j) != nil || j.Phase != "running" {
			return fmt.Errorf("job %s: %+v", id, g)
		}
		return nil
	})
	victim := c.byID(j.NodeID)
	if victim == leader {
		t.Fatalf("the job runs on the leader %s, which has no role=doomed label", victim.name)
	}

	// Refusals change nothing.
	if r := first.cli("node", "remove", victim.id); r.code != 1 || !contains(r.stderr, "is alive", "node leave", "--force") {
		t.Fatalf("remove of a live node without --force: %+v", r)
	}
	if r := first.cli("node", "remove", leader.id, "--force"); r.code != 1 || !contains(r.stderr, "leads the cluster") {
		t.Fatalf("remove of the leader: %+v", r)
	}
	if r := first.cli("node", "remove", "n-00000000"); r.code != 1 || !contains(r.stderr, "no node with id") {
		t.Fatalf("remove of an unknown node: %+v", r)
	}

	// --force: the live node is cut off and its job queued again; it runs
	// on the other node that may run it.
	r = first.cli("node", "remove", victim.id, "--force", "--json")
	var out struct {
		NodeID   string   `json:"node_id"`
		WasAlive bool     `json:"was_alive"`
		Requeued []string `json:"requeued"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.NodeID != victim.id || !out.WasAlive || len(out.Requeued) != 1 || out.Requeued[0] != id {
		t.Fatalf("remove --force: %+v → %+v", r, out)
	}
	var rest []*member
	for _, m := range c.members {
		if m != victim {
			rest = append(rest, m)
		}
	}
	c.waitViews("the removed node out of raft and not alive", 60*time.Second, rest, func(views []view) error {
		for _, v := range views {
			if n, ok := v.node(victim.id); ok && (n.InRaft || n.State == "alive") {
				return fmt.Errorf("%s sees %s %s in_raft=%v", v.ServedBy, victim.id, n.State, n.InRaft)
			}
		}
		return agree(3, 3)(views)
	})
	waitUntil(t, "the moved job completed elsewhere", 2*time.Minute, func() error {
		g := first.cli("job", "get", id, "--json")
		if g.code != 0 || json.Unmarshal([]byte(g.stdout), &j) != nil || j.Phase != "completed" {
			return fmt.Errorf("job %s: %+v", id, g)
		}
		return nil
	})
	if j.Attempt < 2 || j.NodeID == victim.id {
		t.Fatalf("the moved job: %+v", j)
	}
	victim.kill()

	// A dead node needs no --force; its removal says what it did.
	var dead *member
	for _, m := range rest {
		if m != leader && m != first {
			dead = m
			break
		}
	}
	dead.kill()
	c.waitViews("gossip to declare the killed node dead", 60*time.Second, c.running(), func(views []view) error {
		for _, v := range views {
			if n, _ := v.node(dead.id); n.State == "alive" {
				return fmt.Errorf("%s still sees %s alive", v.ServedBy, dead.id)
			}
		}
		return nil
	})
	// Its local operator (made on its machine when it paired) still works
	// before the removal, and goes with it.
	if rr := runData(dead.dataDir, first.addr, "nodes"); rr.code != 0 {
		t.Fatalf("the dead node's local operator before the removal: %+v", rr)
	}
	r = first.cli("node", "remove", dead.id)
	if r.code != 0 || !contains(r.stdout, "node "+dead.id+" removed", "certificate is revoked", "local operator credential", "is revoked too") {
		t.Fatalf("remove of a dead node: %+v", r)
	}
	waitUntil(t, "the removed node's local operator refused", 30*time.Second, func() error {
		if rr := runData(dead.dataDir, first.addr, "nodes"); rr.code == 0 {
			return fmt.Errorf("still accepted: %s", rr.stdout)
		}
		return nil
	})
	if rr := first.cli("nodes"); rr.code != 0 {
		t.Fatalf("the remover's own credential after the removal: %+v", rr)
	}
	c.waitViews("the dead node removed", 60*time.Second, c.running(), func(views []view) error {
		for _, v := range views {
			if n, ok := v.node(dead.id); ok && (n.InRaft || n.State != "removed") {
				return fmt.Errorf("%s sees %s %s in_raft=%v", v.ServedBy, dead.id, n.State, n.InRaft)
			}
		}
		return nil
	})

	// Started again on its old data dir, the removed node says why the
	// cluster refuses it while it tries to rejoin (it used to log only
	// raft's TLS errors until its join gave up, two minutes later).
	dead.restartNode()
	waitUntil(t, "the restarted removed node to say it was removed", 60*time.Second, func() error {
		if !strings.Contains(dead.tail(400), "certificate is refused by the cluster: it was removed") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	dead.kill()
}
