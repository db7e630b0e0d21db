package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A policy set through one node is enforced by every node, and a revoked
// device is refused by every node, within seconds and without restarts.
func TestPolicyAndRevocationReachEveryNode(t *testing.T) {
	tc := newTestCluster(t, 3)
	op := operator(t, tc.first, tc.first.Addr())
	ctx := callCtx(t)

	resp, err := op.Identity.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "device", Name: "ci"}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	code, _ := pairing.Parse(resp.Msg.Code)
	cred, pr, err := client.Pair(ctx, tc.addrs[1], code, client.PairOptions{Name: "ci"}) // paired through a non-CA node
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]*client.Client, 3)
	for i, a := range tc.addrs {
		if devs[i], err = client.New(a, cred); err != nil {
			t.Fatal(err)
		}
		defer devs[i].Close()
	}
	mod := testwasm.Build(t, "reverse")
	submit := func(cl *client.Client) error {
		_, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("x")})
		return err
	}
	for i, cl := range devs {
		if err := submit(cl); err != nil {
			t.Fatalf("device submit via node %d: %v", i, cl.Explain(err))
		}
	}

	// Forbid this device's submissions, through node 3.
	cur, err := op.Policy.GetPolicy(ctx, connect.NewRequest(&palyrav1.GetPolicyRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimPrefix(pr.Principal, "device:")
	src := cur.Msg.Source + "\n@id(\"no-ci-submit\")\nforbid (principal == Palyra::Device::\"" + id + "\", action == Palyra::Action::\"job.submit\", resource);\n"
	op3 := operator(t, tc.first, tc.addrs[2])
	set, err := op3.Policy.SetPolicy(ctx, connect.NewRequest(&palyrav1.SetPolicyRequest{Source: src}))
	if err != nil {
		t.Fatal(op3.Explain(err))
	}
	if set.Msg.Version != 1 { // through a follower, the version it has applied, not the one before
		t.Fatalf("policy set through node 3 answered version %d, want 1", set.Msg.Version)
	}
	for i, cl := range devs {
		waitFor(t, "the forbid to reach node "+tc.addrs[i], 10*time.Second, func() bool {
			err := submit(cl)
			return err != nil && strings.Contains(cl.Explain(err).Message, "no-ci-submit")
		})
	}
	// Reads still allowed.
	if _, err := devs[0].Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{})); err != nil {
		t.Fatalf("status should still be allowed: %v", err)
	}

	// Revoke the device: every node refuses it.
	if _, err := op.Identity.RevokeMember(ctx, connect.NewRequest(&palyrav1.RevokeMemberRequest{Kind: "device", Id: id})); err != nil {
		t.Fatal(op.Explain(err))
	}
	for i := range tc.addrs {
		fresh, _ := client.New(tc.addrs[i], cred)
		waitFor(t, "node "+tc.addrs[i]+" to refuse the revoked device", 10*time.Second, func() bool {
			_, err := fresh.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
			return err != nil && fresh.Explain(err).Code == "unauthenticated"
		})
		fresh.Close()
		// Its existing connections are cut too.
		waitFor(t, "the revoked device's open connection to be refused", 10*time.Second, func() bool {
			_, err := devs[i].Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
			return err != nil
		})
	}
}

// TestPolicyDecidesNodeWork: the policy's node_work actions are enforced.
// A node forbidden worker.heartbeat gets no new work (and jobs still run
// on the others); a policy under which no node could work is refused; a
// permit restored lets the node work again.
func TestPolicyDecidesNodeWork(t *testing.T) {
	tc := newTestCluster(t, 3)
	op := operator(t, tc.first, tc.first.Addr())
	ctx := callCtx(t)
	cur, err := op.Policy.GetPolicy(ctx, connect.NewRequest(&palyrav1.GetPolicyRequest{}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	set := func(src string) error {
		_, err := op.Policy.SetPolicy(ctx, connect.NewRequest(&palyrav1.SetPolicyRequest{Source: src}))
		return err
	}

	// Every node refused: rejected, naming the fix.
	noNodes := strings.Replace(cur.Msg.Source, `Palyra::Action::"node_work",`, ``, 1)
	if noNodes == cur.Msg.Source {
		t.Fatal("the default policy's nodes permit changed; update this test")
	}
	if err := set(noNodes); err == nil || !strings.Contains(op.Explain(err).Message, "refuse every node worker.heartbeat") {
		t.Fatalf("a policy refusing every node's work: %v", err)
	}

	// One node refused: it gets no new work.
	banned := tc.nodes[2].ID()
	if err := set(cur.Msg.Source + "\n@id(\"no-work-" + banned + "\")\nforbid (principal == Palyra::Node::\"" + banned +
		"\", action == Palyra::Action::\"worker.heartbeat\", resource);\n"); err != nil {
		t.Fatal(op.Explain(err))
	}
	mod := testwasm.Build(t, "reverse")
	time.Sleep(1500 * time.Millisecond) // past the node-work decisions' cache on every node
	per := map[string]int{}
	for i := range 30 {
		resp, err := op.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte(fmt.Sprintf("job-%d", i))})
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		per[waitCompleted(t, op, resp.Job.Id).NodeId]++
	}
	if per[banned] != 0 || len(per) != 2 {
		t.Fatalf("jobs per node with %s refused worker.heartbeat: %v", banned, per)
	}

	// The permit back: it works again.
	if err := set(cur.Msg.Source + "\n// v3\n"); err != nil {
		t.Fatal(op.Explain(err))
	}
	waitFor(t, "the node to get work again", 30*time.Second, func() bool {
		resp, err := op.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("again")})
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		return waitCompleted(t, op, resp.Job.Id).NodeId == banned
	})
}
