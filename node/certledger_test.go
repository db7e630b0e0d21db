package node_test

import (
	"context"
	"crypto/x509"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A certificate signed with the cluster's CA key outside the cluster's
// own CA service (a removed voter's disk, a stolen backup) is refused by
// every node, the leader and a follower alike, whether it names the local
// operator (full rights), a device never paired or a node; the
// certificates the cluster issued itself, at its start and by pairing,
// keep working.
func TestCertificatesSignedOutsideTheClusterAreRefused(t *testing.T) {
	first, second, op := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	forge := forger(t, first)
	opCred, err := identity.LoadCredential(first.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	status := func(addr string, cred *identity.Credential) error {
		cl, err := client.New(addr, cred)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err = cl.Node.Status(cctx, connect.NewRequest(&palyrav1.StatusRequest{}))
		return err
	}

	for _, addr := range []string{first.Addr(), second.Addr()} {
		if err := status(addr, opCred); err != nil {
			t.Fatalf("the operator's own certificate refused by %s: %v", addr, op.Explain(err))
		}
	}
	forged := map[string]identity.Principal{
		"the local operator":    opCred.Principal,
		"a device never paired": {Kind: identity.KindDevice, ID: identity.NewID(identity.KindDevice)},
		"the first node":        {Kind: identity.KindNode, ID: first.ID()},
	}
	for what, p := range forged {
		cred := forge(p)
		for _, addr := range []string{first.Addr(), second.Addr()} {
			if err := status(addr, cred); err == nil {
				t.Errorf("%s, through %s: a certificate for %s signed outside the cluster was accepted", what, addr, p)
			}
		}
	}
	// Many forged handshakes at once share the read indexes that judge
	// them and are refused, all of them: none is waved through for want
	// of a judge.
	flood := forge(opCred.Principal)
	var wg sync.WaitGroup
	var accepted atomic.Int32
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			if status(addr, flood) == nil {
				accepted.Add(1)
			}
		}([]string{first.Addr(), second.Addr()}[i%2])
	}
	wg.Wait()
	if n := accepted.Load(); n > 0 {
		t.Errorf("%d of 12 concurrent forged handshakes were accepted", n)
	}

	// A member node relaying a renewal of a forged certificate (a node
	// holding a copied CA key, say) gets it refused by the signer: a forged
	// certificate is never turned into a recorded one. The same relay of a
	// real certificate is renewed.
	nodeCred, err := identity.LoadCredential(second.Layout().NodeCredDir())
	if err != nil {
		t.Fatal(err)
	}
	relay, err := client.New(first.Addr(), nodeCred)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	relayed := func(cur *identity.Credential) error {
		_, csr, err := identity.NewKeyAndCSR(cur.Principal)
		if err != nil {
			t.Fatal(err)
		}
		proof, err := identity.RenewalProof(cur.Key, csr)
		if err != nil {
			t.Fatal(err)
		}
		req := &palyrav1.RenewRequest{CsrDer: csr, Proof: proof}
		for _, c := range append([]*x509.Certificate{cur.Leaf}, cur.Chain...) {
			req.RelayChainDer = append(req.RelayChainDer, c.Raw)
		}
		_, err = relay.Identity.Renew(ctx, connect.NewRequest(req))
		return err
	}
	if err := relayed(forge(opCred.Principal)); err == nil || !strings.Contains(err.Error(), "was not issued by this cluster's CA service") {
		t.Errorf("a relayed renewal of a forged operator certificate: %v, want it refused as never issued", err)
	}
	if err := relayed(opCred); err != nil {
		t.Errorf("a relayed renewal of the operator's own certificate: %v", relay.Explain(err))
	}

	// The ledger holds what the cluster issued: the first node's and its
	// operator's certificates, the second node's (and its operator's).
	if n := first.StateForTest().IssuedCerts(); n < 3 {
		t.Errorf("the ledger holds %d certificates, want at least 3", n)
	}
	if _, complete, started := second.StateForTest().CertLedgerStarted(); !started || !complete {
		t.Errorf("a new cluster's ledger: started %v complete %v, want both", started, complete)
	}
}

// A node that cannot reach a leader cannot vouch for a certificate its
// ledger lacks, and refuses it: a forged node certificate let in there
// could win its vote and lead it. The certificates it knows keep working.
func TestNodeWithoutLeaderRefusesUnknownCertificates(t *testing.T) {
	tc := newTestCluster(t, 3)
	first := tc.first
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opCred, err := identity.LoadCredential(first.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	forge := forger(t, first)
	peer := tc.nodes[1].ID()
	for i := 1; i < 3; i++ {
		tc.kill(i)
	}
	waitFor(t, "the survivor to lose its leader", time.Minute, func() bool {
		_, leader := first.RaftForTest().LeaderWithID()
		return leader == ""
	})
	// status returns the code of the error the call ended with ("" if none).
	status := func(cred *identity.Credential) string {
		cl, err := client.New(first.Addr(), cred)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if _, err = cl.Node.Status(cctx, connect.NewRequest(&palyrav1.StatusRequest{})); err != nil {
			return cl.Explain(err).Code
		}
		return ""
	}
	if code := status(opCred); code != "" {
		t.Fatalf("the operator's own certificate on a node without a leader: %s", code)
	}
	// Refused in the handshake (the credential), not let in and answered
	// "unavailable": raft and gossip take the same connections.
	for _, p := range []identity.Principal{opCred.Principal, {Kind: identity.KindNode, ID: peer}} {
		if code := status(forge(p)); code != "unauthenticated" {
			t.Errorf("a forged certificate for %s on a node without a leader: %q, want it refused in the handshake (unauthenticated)", p, code)
		}
	}
}

// forger signs certificates with n's CA key as a copy of it would: the
// keyring opened without the cluster's ledger, so nothing is recorded.
func forger(t *testing.T, n *node.Node) func(identity.Principal) *identity.Credential {
	t.Helper()
	kr, err := identity.OpenKeyring(n.Layout().CADir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kr.Close() })
	fps := kr.Fingerprints()
	if len(fps) != 1 {
		t.Fatalf("keyring holds %d CAs, want 1", len(fps))
	}
	ca := kr.Get(fps[0])
	return func(p identity.Principal) *identity.Credential {
		key, csr, err := identity.NewKeyAndCSR(p)
		if err != nil {
			t.Fatal(err)
		}
		chain, err := ca.Sign(context.Background(), csr, p, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return &identity.Credential{Principal: p, Leaf: chain[0], Chain: chain[1:], Key: key, RootCerts: []*x509.Certificate{ca.Root()}}
	}
}
