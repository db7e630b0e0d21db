package mesh_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
	"github.com/quic-go/quic-go"
)

// streamWorks reports whether an echo over a fresh TagRPC stream succeeds.
func streamWorks(t *testing.T, from *mesh.Transport, to string) bool {
	t.Helper()
	c, err := from.OpenStream(ctxTimeout(t, 3*time.Second), to, mesh.TagRPC)
	if err != nil {
		return false
	}
	defer c.Close()
	back, err := roundTrip(c, []byte("x"))
	return err == nil && string(back) == "x"
}

func TestClientFromAnotherCAIsRefused(t *testing.T) {
	ca, rogueCA := meshtest.NewCA(t, "cluster"), meshtest.NewCA(t, "rogue")
	a := newNode(t, ca, "node-a")
	handled := serveEcho(t, a, mesh.TagRPC)

	// The rogue trusts a's CA (so it would accept a's server certificate)
	// but its own certificate is signed by another CA.
	rogueClient := rogueCA.ClientTLS(t, "node-a")
	rogueClient.RootCAs = ca.Pool
	rogue, err := mesh.Listen(mesh.Config{
		ListenAddr: "127.0.0.1:0",
		ServerTLS:  rogueCA.ServerTLS(t, "rogue"),
		ClientTLS:  rogueClient,
		Logger:     testLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()

	if streamWorks(t, rogue, addrOf(a)) {
		t.Fatal("a peer with a certificate from another CA exchanged a stream")
	}
	if c, err := rogue.DialAPI(ctxTimeout(t, 3*time.Second), addrOf(a)); err == nil {
		// TLS 1.3 clients may finish before the server checks their cert;
		// the server must then close the connection.
		select {
		case <-c.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("API connection with a foreign certificate stayed open")
		}
	}
	select {
	case <-handled:
		t.Fatal("the foreign peer's stream reached a handler")
	case c := <-a.APIConns():
		t.Fatalf("the foreign client's API connection was delivered from %v", c.RemoteAddr())
	default:
	}
	// And the honest path still works.
	b := newNode(t, ca, "node-b")
	if !streamWorks(t, b, addrOf(a)) {
		t.Fatal("a peer from the right CA could not exchange a stream")
	}
}

// With VerifyClientCertIfGiven (so unpaired callers can reach pairing over
// the API), mesh itself still refuses peer connections without a certificate.
func TestCertlessCallerReachesAPIButNotPeerProtocol(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	srv := ca.ServerTLS(t, "node-a")
	srv.ClientAuth = tls.VerifyClientCertIfGiven
	a, err := mesh.Listen(mesh.Config{ListenAddr: "127.0.0.1:0", ServerTLS: srv, ClientTLS: ca.ClientTLS(t, "node-a"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	handled := serveEcho(t, a, mesh.TagRPC)

	dial := func(alpn string) (*quic.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return quic.DialAddr(ctx, addrOf(a), &tls.Config{RootCAs: ca.Pool, NextProtos: []string{alpn}}, nil)
	}

	api, err := dial(mesh.ALPNAPI)
	if err != nil {
		t.Fatalf("cert-less API dial: %v", err)
	}
	defer api.CloseWithError(0, "")
	select {
	case c := <-a.APIConns():
		if len(c.ConnectionState().TLS.PeerCertificates) != 0 {
			t.Error("delivered API conn claims a peer certificate")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cert-less API connection was not delivered on APIConns")
	}

	peer, err := dial(mesh.ALPNPeer)
	if err != nil {
		t.Fatalf("cert-less peer handshake failed (%v); with VerifyClientCertIfGiven mesh itself must refuse it", err)
	}
	if s, err := peer.OpenStreamSync(ctxTimeout(t, 3*time.Second)); err == nil {
		s.Write([]byte{byte(mesh.TagRPC), 'x'})
	}
	select {
	case <-peer.Context().Done():
		var appErr *quic.ApplicationError
		if cause := context.Cause(peer.Context()); !errors.As(cause, &appErr) || !appErr.Remote || !strings.Contains(appErr.ErrorMessage, "client certificate") {
			t.Errorf("peer connection closed with %v, want mesh's refusal naming the client certificate", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cert-less peer connection stayed open")
	}
	select {
	case <-handled:
		t.Fatal("a cert-less peer's stream reached a handler")
	default:
	}
}

func TestHandshakeWithUnknownALPNFails(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	a := newNode(t, ca, "node-a")
	cfg := ca.ClientTLS(t, "x")
	cfg.NextProtos = []string{"http/1.1"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c, err := quic.DialAddr(ctx, addrOf(a), cfg, nil); err == nil {
		c.CloseWithError(0, "")
		t.Fatal("handshake with an unknown ALPN succeeded")
	}
}

// While RefuseAPI says so, API handshakes fail with its alert (a starting
// node took calls it could not answer, holding them until it served);
// peer connections are unaffected, and API ones work again after.
func TestRefuseAPIRefusesOnlyAPIHandshakes(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	a, err := mesh.Listen(mesh.Config{ListenAddr: "127.0.0.1:0", ServerTLS: ca.ServerTLS(t, "node-a"), ClientTLS: ca.ClientTLS(t, "node-a"), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	dial := func(alpn string) (*quic.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		cfg := ca.ClientTLS(t, "node-b")
		cfg.NextProtos = []string{alpn}
		return quic.DialAddr(ctx, addrOf(a), cfg, nil)
	}
	a.RefuseAPI(true)
	if c, err := dial(mesh.ALPNAPI); err == nil || !strings.Contains(err.Error(), mesh.APIRefusedAlert) {
		if c != nil {
			c.CloseWithError(0, "")
		}
		t.Fatalf("API dial while refused: %v, want the refusal's reason", err)
	}
	peer, err := dial(mesh.ALPNPeer)
	if err != nil {
		t.Fatalf("peer dial while the API is refused: %v", err)
	}
	peer.CloseWithError(0, "")
	a.RefuseAPI(false)
	api, err := dial(mesh.ALPNAPI)
	if err != nil {
		t.Fatalf("API dial after the refusal ended: %v", err)
	}
	api.CloseWithError(0, "")
}
