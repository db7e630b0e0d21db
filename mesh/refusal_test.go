package mesh_test

import (
	"crypto/x509"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
)

// A peer that refuses this node's certificate in the TLS handshake (as a
// node does with a revoked one) is counted by CertRefusals; a peer that
// does not answer is not.
func TestCertRefusalsCountsRefusingPeers(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	stls := ca.ServerTLS(t, "server")
	var readmitted atomic.Bool
	stls.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) > 0 && chains[0][0].Subject.CommonName == "removed" && !readmitted.Load() {
			return errors.New("certificate revoked")
		}
		return nil
	}
	server, err := mesh.Listen(mesh.Config{ListenAddr: "127.0.0.1:0", ServerTLS: stls, ClientTLS: ca.ClientTLS(t, "server"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	serveEcho(t, server, mesh.TagRPC)

	removed := newNode(t, ca, "removed")
	if streamWorks(t, removed, addrOf(server)) {
		t.Fatal("a refused certificate exchanged a stream")
	}
	eventually(t, 5*time.Second, "the refusal counted", func() bool {
		refusing, ended := removed.CertRefusals()
		return refusing == 1 && ended == 1
	})

	// Nobody answers at this address: unreachable, not refused.
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := l.LocalAddr().String()
	defer l.Close()
	lonely := newNode(t, ca, "lonely")
	if streamWorks(t, lonely, silent) {
		t.Fatal("a stream to nobody worked")
	}
	if refusing, _ := lonely.CertRefusals(); refusing != 0 {
		t.Fatalf("an unreachable peer counted as refusing: %d", refusing)
	}
	if streamWorks(t, removed, silent) {
		t.Fatal("a stream to nobody worked")
	}
	eventually(t, 10*time.Second, "the unreachable peer counted as ended, not refusing", func() bool {
		refusing, ended := removed.CertRefusals()
		return refusing == 1 && ended == 2
	})
	// And an accepted node is not refused.
	friend := newNode(t, ca, "friend")
	if !streamWorks(t, friend, addrOf(server)) {
		t.Fatal("an accepted node could not exchange a stream")
	}
	if refusing, _ := friend.CertRefusals(); refusing != 0 {
		t.Fatalf("an accepted node counted as refused: %d", refusing)
	}
	// A peer that refused once and accepts again is no longer counted: a
	// healthy node must not keep saying it was removed.
	readmitted.Store(true)
	if !streamWorks(t, removed, addrOf(server)) {
		t.Fatal("the readmitted node could not exchange a stream")
	}
	if refusing, _ := removed.CertRefusals(); refusing != 0 {
		t.Fatalf("a peer that accepts again still counts as refusing: %d", refusing)
	}
}

// A node whose trust is another CA's (the cluster replaced its root while
// the node was down, or the peer is another cluster's) refuses the peer's
// certificate itself: counted by PeerCertRefusals, not by CertRefusals.
func TestPeerCertRefusalsCountsPeersThisNodeRefuses(t *testing.T) {
	ca, old := meshtest.NewCA(t, "cluster"), meshtest.NewCA(t, "old root")
	server, err := mesh.Listen(mesh.Config{ListenAddr: "127.0.0.1:0", ServerTLS: ca.ServerTLS(t, "server"), ClientTLS: ca.ClientTLS(t, "server"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	serveEcho(t, server, mesh.TagRPC)

	stale := newNode(t, old, "stale")
	if streamWorks(t, stale, addrOf(server)) {
		t.Fatal("a node trusting another root exchanged a stream")
	}
	eventually(t, 5*time.Second, "the refusal of the peer counted", func() bool {
		refused, ended := stale.PeerCertRefusals()
		return refused == 1 && ended == 1
	})
	if refusing, _ := stale.CertRefusals(); refusing != 0 {
		t.Errorf("this node refusing the peer counted as the peer refusing it: %d", refusing)
	}
	friend := newNode(t, ca, "friend")
	if !streamWorks(t, friend, addrOf(server)) {
		t.Fatal("a node of the cluster could not exchange a stream")
	}
	if refused, _ := friend.PeerCertRefusals(); refused != 0 {
		t.Errorf("a node of the cluster counted a refusal of its peer: %d", refused)
	}
}

// A peer connected now, in either direction, counts as accepting: a
// healthy node whose other peers had dialled in, and whose one dial of a
// bad peer was refused (either way), looked refused by every peer it
// tried: 1 of 1 (a leader dialling a node down through a CA rotation
// took itself for removed, or for stale).
func TestRefusalCountsTakeLivePeersAsAccepting(t *testing.T) {
	ca, other := meshtest.NewCA(t, "cluster"), meshtest.NewCA(t, "another")
	healthy := newNode(t, ca, "healthy")
	serveEcho(t, healthy, mesh.TagRPC)
	friend := newNode(t, ca, "friend")
	if !streamWorks(t, friend, addrOf(healthy)) { // inbound to healthy, and live
		t.Fatal("the friend could not reach the healthy node")
	}
	stranger := newNode(t, other, "stranger") // healthy refuses its certificate, and it refuses healthy's
	serveEcho(t, stranger, mesh.TagRPC)
	if streamWorks(t, healthy, addrOf(stranger)) {
		t.Fatal("a stream to another cluster's node worked")
	}
	eventually(t, 5*time.Second, "the refused dial counted among two peers tried", func() bool {
		refused, tried := healthy.PeerCertRefusals()
		return refused == 1 && tried == 2
	})
	if refusing, tried := healthy.CertRefusals(); refusing == tried {
		t.Errorf("CertRefusals %d of %d: a node with a live peer counts as refused by all", refusing, tried)
	}
}
