package node_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/internal/testwatch"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// keyFiles lists the CA key files under a node's data dir.
func keyFiles(t *testing.T, n *node.Node) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(n.Layout().CADir(), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "ca.key" {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// custody checks that exactly the voters hold the active root's key, in
// memory and on disk, as n sees the voters.
func custody(t *testing.T, nodes []*node.Node) error {
	active, ok := nodes[0].StateForTest().Trust().Active()
	if !ok {
		return errors.New("no active root recorded")
	}
	voters := map[string]bool{}
	for _, m := range nodes[0].Cluster().Members() {
		voters[m.ID] = m.Voter
	}
	for _, n := range nodes {
		held := n.CAKeysForTest()
		files := keyFiles(t, n)
		switch {
		case voters[n.ID()] && !slices.Contains(held, active.Fingerprint):
			return fmt.Errorf("voter %s does not hold the active key (holds %v)", n.ID(), held)
		case !voters[n.ID()] && (len(held) > 0 || len(files) > 0):
			return fmt.Errorf("non-voter %s holds CA keys %v (files %v)", n.ID(), held, files)
		case voters[n.ID()] && len(files) != len(held):
			return fmt.Errorf("voter %s: %d keys in memory, key files %v", n.ID(), len(held), files)
		}
	}
	return nil
}

// The CA key follows the voters: every voter fetches it, a non-voter never
// has it and is refused when it asks, and the node that created the
// cluster, killed and replaced as a voter, deletes its copy when it comes
// back as a non-voter. Meanwhile pairing and renewal keep working through
// any node.
func TestCAKeyFollowsTheVoters(t *testing.T) {
	tc := newTestCluster(t, 4)
	first := tc.first
	waitFor(t, "exactly the voters to hold the CA key", time.Minute, func() bool { return custody(t, tc.live()) == nil })

	var spare *node.Node
	for _, n := range tc.live() {
		if !slices.ContainsFunc(first.Cluster().Members(), func(m cluster.Member) bool { return m.ID == n.ID() && m.Voter }) {
			spare = n
		}
	}
	if spare == nil {
		t.Fatalf("no non-voter among 4 nodes with 3 target voters: %+v", first.Cluster().Members())
	}
	ctx := callCtx(t)
	if _, err := spare.Cluster().FetchCAKeys(ctx, nil, func([]cluster.CAKey) bool { return true }); !errors.Is(err, cluster.ErrNotVoter) {
		t.Fatalf("a non-voter asked the voters for the CA key: %v; want it refused", err)
	}

	// The node that created the cluster goes; the spare takes its seat
	// and its key.
	tc.kill(0)
	waitFor(t, "the spare promoted and holding the key", time.Minute, func() bool {
		return custody(t, tc.live()) == nil && slices.ContainsFunc(tc.live()[0].Cluster().Members(), func(m cluster.Member) bool { return m.ID == spare.ID() && m.Voter })
	})

	// Pairing through a node that never held the key when the cluster
	// formed, and renewal through it.
	op := operator(t, first, spare.Addr())
	resp, err := op.Identity.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "device"}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	code, _ := pairing.Parse(resp.Msg.Code)
	cred, _, err := client.Pair(ctx, spare.Addr(), code, client.PairOptions{Name: "after"})
	if err != nil {
		t.Fatalf("pairing after the first node's loss: %v", err)
	}
	dev, err := client.New(tc.addrs[2], cred)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	renewed, err := dev.Renew(ctx, cred)
	if err != nil || renewed.Leaf.SerialNumber.Cmp(cred.Leaf.SerialNumber) == 0 {
		t.Fatalf("device renewal after the first node's loss: %v", err)
	}

	// Back on its data dir, the first node is not a voter any more (three
	// healthy voters remain), so it drops its copy of the key.
	tc.restart(0)
	waitFor(t, "the returning first node to delete its key", time.Minute, func() bool {
		return custody(t, tc.live()) == nil && len(tc.nodes[0].CAKeysForTest()) == 0
	})
	if files := keyFiles(t, tc.nodes[0]); len(files) != 0 {
		t.Fatalf("key files left on the demoted node: %v", files)
	}
}

// A device renews through a node that holds no CA key: the node relays the
// request with the device's certificate and proof, and the signer refuses
// a relay whose proof is not the device's.
func TestRenewalRelayedByANonVoter(t *testing.T) {
	tc := newTestCluster(t, 4)
	waitFor(t, "exactly the voters to hold the CA key", time.Minute, func() bool { return custody(t, tc.live()) == nil })
	var spare *node.Node
	for _, n := range tc.live() {
		if len(n.CAKeysForTest()) == 0 {
			spare = n
		}
	}
	ctx := callCtx(t)
	op := operator(t, tc.first, spare.Addr())
	resp, err := op.Identity.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "device"}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	code, _ := pairing.Parse(resp.Msg.Code)
	cred, _, err := client.Pair(ctx, spare.Addr(), code, client.PairOptions{}) // relayed too
	if err != nil {
		t.Fatal(err)
	}
	dev, err := client.New(spare.Addr(), cred)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	fresh, err := dev.Renew(ctx, cred)
	if err != nil {
		t.Fatalf("renewal relayed by a non-voter: %v", err)
	}
	if fresh.Principal != cred.Principal {
		t.Fatalf("renewed for %s, want %s", fresh.Principal, cred.Principal)
	}

	// Without the proof, a node that cannot sign says how to do it.
	_, csr, _ := identity.NewKeyAndCSR(cred.Principal)
	_, err = dev.Identity.Renew(ctx, connect.NewRequest(&palyrav1.RenewRequest{CsrDer: csr}))
	if e := dev.Explain(err); err == nil || e.Code != "no_signer" || e.Hint == "" {
		t.Fatalf("renewal without proof through a non-voter: %v; want no_signer with a hint", e)
	}
	// A proof made with another key is refused by the signer.
	other, _, _ := identity.NewKeyAndCSR(cred.Principal)
	proof, _ := identity.RenewalProof(other, csr)
	_, err = dev.Identity.Renew(ctx, connect.NewRequest(&palyrav1.RenewRequest{CsrDer: csr, Proof: proof}))
	if e := dev.Explain(err); err == nil || !strings.Contains(e.Message, "proof") {
		t.Fatalf("renewal with a forged proof: %v; want it refused", e)
	}
}

// issuedBy reports whether root fingerprint fp issued cred's certificate.
func issuedBy(cred *identity.Credential, fp string) bool {
	r := identity.IssuingRoot(cred.Leaf, cred.RootCerts)
	return r != nil && identity.Fingerprint(r.Raw) == fp
}

// 'ca rotate' on a running cluster: calls made all along, over new
// connections, through every node, by the operator and by a device, never
// fail; every node and the local operator end up with certificates of the
// new root without a restart; the device, still on the old root while the
// nodes move (its calls keep working through the cross-certificate), does
// after renewing; the old root is dropped after the overlap.
func TestCARotationWithoutAFailedCall(t *testing.T) {
	tc := newTestCluster(t, 3)
	waitFor(t, "every voter to hold the CA key", time.Minute, func() bool { return custody(t, tc.live()) == nil })
	ctx := callCtx(t)
	op := operator(t, tc.first, tc.first.Addr())
	resp, err := op.Identity.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "device"}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	code, _ := pairing.Parse(resp.Msg.Code)
	devCred, _, err := client.Pair(ctx, tc.addrs[1], code, client.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var devMu sync.Mutex
	device := func() *identity.Credential { devMu.Lock(); defer devMu.Unlock(); return devCred }

	// Status through every node over a fresh connection, as the operator
	// (its credential read from disk each time, as the CLI does) and as
	// the device, until stopped.
	stop := make(chan struct{})
	var calls atomic.Int64
	var failures []string
	var failMu sync.Mutex
	var hungAt atomic.Pointer[string]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			opCred, err := identity.LoadCredential(tc.first.Layout().OperatorDir())
			if err != nil {
				failMu.Lock()
				failures = append(failures, "load operator credential: "+err.Error())
				failMu.Unlock()
				continue
			}
			for who, cred := range map[string]*identity.Credential{"operator": opCred, "device": device()} {
				addr := tc.addrs[i%len(tc.addrs)]
				cl, _ := client.New(addr, cred)
				// A call that hangs is a failure too; where it hung is kept.
				cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
				watch := time.AfterFunc(25*time.Second, func() {
					buf := make([]byte, 64<<20)
					where := testwatch.Summary(string(buf[:goruntime.Stack(buf, true)]), t.Name(), 40)
					hungAt.CompareAndSwap(nil, &where)
				})
				_, err := cl.Node.Status(cctx, connect.NewRequest(&palyrav1.StatusRequest{}))
				watch.Stop()
				ccancel()
				cl.Close()
				calls.Add(1)
				if err != nil {
					failMu.Lock()
					failures = append(failures, fmt.Sprintf("%s via %s: %v", who, addr, cl.Explain(err)))
					failMu.Unlock()
				}
			}
		}
	}()

	old, _ := tc.first.StateForTest().Trust().Active()
	rot, err := op.Identity.RotateCA(ctx, connect.NewRequest(&palyrav1.RotateCARequest{OverlapMs: (15 * time.Second).Milliseconds()}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	if !rot.Msg.Activated || rot.Msg.OldFingerprint != old.Fingerprint || rot.Msg.NewFingerprint == old.Fingerprint {
		t.Fatalf("rotate: %+v", rot.Msg)
	}
	newFP := rot.Msg.NewFingerprint
	waitFor(t, "every node on the new root", time.Minute, func() bool {
		for _, n := range tc.live() {
			if !issuedBy(n.CredentialForTest(), newFP) {
				return false
			}
		}
		return true
	})
	before := calls.Load()
	waitFor(t, "calls from the device still on the old root", 30*time.Second, func() bool { return calls.Load() > before+20 })
	if _, ok := tc.first.StateForTest().Trust().Root(old.Fingerprint); !ok {
		t.Fatal("the old root was dropped before the overlap ended")
	}

	// The device renews on its next call, as the CLI does.
	dev, _ := client.New(tc.addrs[2], device())
	fresh, err := dev.Renew(ctx, device())
	dev.Close()
	if err != nil || !issuedBy(fresh, newFP) {
		t.Fatalf("device renewal after the rotation: %v", err)
	}
	devMu.Lock()
	devCred = fresh
	devMu.Unlock()

	waitFor(t, "every node and the operator on the new root, and the old root dropped", time.Minute, func() bool {
		for _, n := range tc.live() {
			if !issuedBy(n.CredentialForTest(), newFP) {
				return false
			}
			if _, ok := n.StateForTest().Trust().Root(old.Fingerprint); ok {
				return false
			}
		}
		opCred, err := identity.LoadCredential(tc.first.Layout().OperatorDir())
		return err == nil && issuedBy(opCred, newFP) && len(opCred.RootCerts) == 1
	})
	for _, n := range tc.live() {
		if held := n.CAKeysForTest(); !slices.Equal(held, []string{newFP}) {
			t.Errorf("voter %s holds keys %v after the rotation, want only the new root's", n.ID(), held)
		}
	}
	// A little longer under the new root alone, then stop.
	before = calls.Load()
	waitFor(t, "more calls after the old root was dropped", 30*time.Second, func() bool { return calls.Load() > before+20 })
	close(stop)
	<-done
	if w := hungAt.Load(); w != nil {
		t.Logf("a call was still waiting after 25 s:\n%s", *w)
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d calls failed during the rotation, e.g. %s", len(failures), calls.Load(), failures[0])
	}
	t.Logf("%d calls, none failed", calls.Load())
}
