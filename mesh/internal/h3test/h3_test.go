package h3test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func listen(t *testing.T, ca *meshtest.CA, name string) *mesh.Transport {
	t.Helper()
	tr, err := mesh.Listen(mesh.Config{
		ListenAddr: "127.0.0.1:0",
		ServerTLS:  ca.ServerTLS(t, name),
		ClientTLS:  ca.ClientTLS(t, name),
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("Listen %s: %v", name, err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestHTTP3OverAPIConns serves HTTP/3 on the conns APIConns delivers and
// calls it from another node through DialAPI, as API forwarding will.
func TestHTTP3OverAPIConns(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	server, client := listen(t, ca, "node-a"), listen(t, ca, "node-b")

	srv := &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		io.WriteString(w, "hello "+cn+" via "+r.Proto)
	})}
	served := make(chan string, 4)
	go func() {
		for c := range server.APIConns() {
			served <- c.ConnectionState().TLS.NegotiatedProtocol
			go srv.ServeQUICConn(c)
		}
	}()
	defer srv.Close()

	rt := &http3.Transport{
		Dial: func(ctx context.Context, addr string, _ *tls.Config, _ *quic.Config) (*quic.Conn, error) {
			return client.DialAPI(ctx, addr)
		},
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+server.Addr().String()+"/hello", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("HTTP/3 round trip: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != "hello node-b via HTTP/3.0" {
		t.Fatalf("got %d %q, want 200 \"hello node-b via HTTP/3.0\"", resp.StatusCode, body)
	}
	if alpn := <-served; alpn != mesh.ALPNAPI {
		t.Errorf("APIConns delivered a conn with ALPN %q, want %q", alpn, mesh.ALPNAPI)
	}
}

// A CLI-style client that dials with its own QUIC stack (no mesh Transport)
// reaches the same server.
func TestHTTP3FromPlainClient(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	server := listen(t, ca, "node-a")
	srv := &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})}
	go func() {
		for c := range server.APIConns() {
			go srv.ServeQUICConn(c)
		}
	}()
	defer srv.Close()
	rt := &http3.Transport{TLSClientConfig: ca.ClientTLS(t, "operator-laptop")}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+server.Addr().String()+"/", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("HTTP/3 round trip: %v", err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); string(body) != "ok" {
		t.Fatalf("body %q, want ok", body)
	}
}
