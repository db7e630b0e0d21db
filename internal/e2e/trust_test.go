package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A node code from another cluster, aimed at this cluster, is refused by
// the joiner itself (the code pins the other cluster's CA) with a clear
// error, and leaves the data dir usable for a real join. The other
// cluster's operator credential is refused by this cluster's API.
func TestForeignClusterCannotJoinOrCall(t *testing.T) {
	t.Parallel()
	home := newLoopbackCluster(t, 1)
	home.form()
	foreign := newLoopbackCluster(t, 1)
	foreign.form()
	h, f := home.members[0], foreign.members[0]

	joiner := &member{t: t, name: "joiner", dataDir: t.TempDir(), addr: freeUDPAddr(t), opDir: h.dataDir}
	t.Cleanup(joiner.kill)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := joiner.command(ctx, "--data-dir", joiner.dataDir, "node", "join", "--code", foreign.pairCode(f),
		"--peer", h.addr, "--listen", joiner.addr).CombinedOutput()
	ee, _ := err.(*exec.ExitError)
	if ee == nil || ee.ExitCode() != 1 || !contains(string(out), "is not part of the cluster that made this code", h.addr) {
		t.Fatalf("join with another cluster's code: %v\n%s\nwant exit 1 and a wrong-cluster error naming %s", err, out, h.addr)
	}
	// Nothing was left behind: the same data dir joins with a real code.
	joiner.joinNode(home.pairCode(h), h.addr)
	joiner.waitUp(90 * time.Second)

	foreignOperator := &member{t: t, name: "foreign operator", opDir: f.dataDir, addr: h.addr}
	r := foreignOperator.cli("status")
	if r.code != 1 || !strings.Contains(r.stderr, h.addr) || !strings.Contains(r.stderr, "trust") {
		t.Fatalf("another cluster's operator calling this cluster: %+v; want exit 1 and a trust error", r)
	}
}

// A node holding a certificate from another cluster's CA, pointed at this
// cluster as its seed, cannot join gossip or raft: its start fails, and
// this cluster never lists it.
func TestForeignCANodeCannotJoinGossipOrRaft(t *testing.T) {
	t.Parallel()
	home := newLoopbackCluster(t, 1)
	home.form()
	foreign := newLoopbackCluster(t, 1)
	foreign.form()
	h, f := home.members[0], foreign.members[0]

	// A genuine node credential of the foreign cluster, set up to join home.
	code, err := pairing.Parse(foreign.pairCode(f))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred, resp, err := client.Pair(ctx, f.addr, code, client.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	intruder := &member{t: t, name: "intruder", dataDir: t.TempDir(), addr: freeUDPAddr(t), opDir: h.dataDir}
	t.Cleanup(intruder.kill)
	if err := node.PrepareJoin(intruder.dataDir, cred, resp.ClusterName, []string{h.addr}, resp.DataKey); err != nil {
		t.Fatal(err)
	}
	intruder.startNode("--log-level", "debug")
	// The join retries until its deadline (minutes); its debug log says why
	// each attempt failed, which is what a user would read.
	waitUntil(t, "the intruder's join to be refused for its CA", time.Minute, func() error {
		if gone, err := intruder.exited(); gone {
			t.Fatalf("intruder exited early (%v); log:\n%s", err, intruder.tail(20))
		}
		if log := intruder.tail(200); !contains(log, "join attempt failed", "is not signed by this cluster's CA") {
			return errString("no refused join attempt logged yet")
		}
		return nil
	})
	if intruder.ready() {
		t.Fatalf("intruder with another cluster's certificate became ready; log:\n%s", intruder.tail(30))
	}
	if v, ok := h.nodes(); !ok || len(v.Nodes) != 1 {
		t.Fatalf("home cluster lists %s; want only its own node", v)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// revokeNode revokes a node through the identity API as the cluster's
// operator. There is no CLI for it ('palyra device revoke' is for devices).
func revokeNode(t *testing.T, via *member, id string) {
	t.Helper()
	cred, err := identity.LoadCredential(node.Layout{Dir: via.opDir}.OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(via.addr, cred)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Identity.RevokeMember(ctx, connect.NewRequest(&palyrav1.RevokeMemberRequest{Kind: "node", Id: id})); err != nil {
		t.Fatalf("revoke node %s: %v", id, cl.Explain(err))
	}
}

// A node revoked through the identity API is shut out: the others cut it
// off and drop it from raft, the rest still commits, and restarted it is
// refused in the handshake and does not come back.
func TestRevokedNodeIsShutOut(t *testing.T) {
	t.Parallel()
	c := newLoopbackCluster(t, 3)
	c.form()
	views := c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))
	leader := c.byID(leaderOf(views))
	var victim *member
	var rest []*member
	for _, m := range c.members {
		if m != leader && victim == nil {
			victim = m
		} else {
			rest = append(rest, m)
		}
	}
	revokeNode(t, leader, victim.id)
	t.Logf("revoked %s (%s)", victim.id, victim.name)
	c.waitViews("the revoked node cut off and out of raft", 60*time.Second, rest, func(views []view) error {
		for _, v := range views {
			if n, ok := v.node(victim.id); ok && (n.State == "alive" || n.InRaft || n.Voter) {
				return errString(fmt.Sprintf("%s still sees %s %s, in_raft=%v voter=%v", v.ServedBy, victim.id, n.State, n.InRaft, n.Voter))
			}
		}
		return nil
	})
	reverse := testwasm.Path(t, "reverse")
	if j, r := leader.runJob(reverse, "after revoke", time.Minute); j.Phase != "completed" {
		t.Fatalf("job after the revocation: %+v %+v", j, r)
	}

	// Restarted, the revoked node cannot come back.
	victim.kill()
	victim.startNode()
	waitUntil(t, "the restarted revoked node to be refused by its peers", time.Minute, func() error {
		if !strings.Contains(victim.tail(300), "bad certificate") {
			return errString("no refused handshake in its log yet")
		}
		return nil
	})
	if victim.ready() {
		t.Fatalf("the revoked node became ready again; log:\n%s", victim.tail(30))
	}
	for _, m := range rest {
		if v, ok := m.nodes(); !ok {
			t.Fatalf("%s did not answer", m.name)
		} else if n, _ := v.node(victim.id); n.State == "alive" || n.InRaft {
			t.Fatalf("%s sees the restarted revoked node back: %s", m.name, v)
		}
	}
}
