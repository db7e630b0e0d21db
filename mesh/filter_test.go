package mesh_test

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
)

// A PeerFilter closes peer-protocol connections it refuses before any
// stream is served; accepted peers are unaffected.
func TestPeerFilterRefusesPeers(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	server, err := mesh.Listen(mesh.Config{
		ListenAddr: "127.0.0.1:0", ServerTLS: ca.ServerTLS(t, "server"), ClientTLS: ca.ClientTLS(t, "server"), Logger: testLogger(),
		PeerFilter: func(cs tls.ConnectionState) error {
			if cs.PeerCertificates[0].Subject.CommonName == "intruder" {
				return errors.New("not a node")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	got := serveEcho(t, server, mesh.TagRPC)

	friend := newNode(t, ca, "friend")
	c, err := friend.OpenStream(ctxTimeout(t, 5*time.Second), addrOf(server), mesh.TagRPC)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := roundTrip(c, []byte("hi")); err != nil || string(out) != "hi" {
		t.Fatalf("accepted peer: %q %v", out, err)
	}
	c.Close()
	<-got

	intruder := newNode(t, ca, "intruder")
	c, err = intruder.OpenStream(ctxTimeout(t, 5*time.Second), addrOf(server), mesh.TagRPC)
	if err == nil {
		_, err = roundTrip(c, []byte("hi"))
		c.Close()
	}
	if err == nil {
		t.Fatal("refused peer got a stream answered")
	}
	select {
	case <-got:
		t.Fatal("refused peer's stream reached the handler")
	case <-time.After(200 * time.Millisecond):
	}
}
