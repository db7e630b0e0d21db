package mesh_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
	"github.com/quic-go/quic-go"
)

// testLogger discards logs unless MESH_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("MESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newNode starts a Transport on a free loopback port with a cert for name.
func newNode(t *testing.T, ca *meshtest.CA, name string) *mesh.Transport {
	t.Helper()
	return newNodeAt(t, ca, name, "127.0.0.1:0")
}

func newNodeAt(t *testing.T, ca *meshtest.CA, name, listen string) *mesh.Transport {
	t.Helper()
	tr, err := mesh.Listen(mesh.Config{
		ListenAddr: listen,
		ServerTLS:  ca.ServerTLS(t, name),
		ClientTLS:  ca.ClientTLS(t, name),
		Logger:     testLogger(),
	})
	if err != nil {
		t.Fatalf("Listen %s: %v", name, err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func addrOf(tr *mesh.Transport) string { return tr.Addr().String() }

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// serveEcho handles streams of tag by echoing what it reads, and reports
// each stream on the returned channel (if there is room).
func serveEcho(t *testing.T, tr *mesh.Transport, tag mesh.Tag) <-chan net.Conn {
	t.Helper()
	got := make(chan net.Conn, 16)
	err := tr.Handle(tag, func(c net.Conn, _ mesh.PeerInfo) {
		select {
		case got <- c:
		default:
		}
		echo(c)
	})
	if err != nil {
		t.Fatalf("Handle(%v): %v", tag, err)
	}
	return got
}

func echo(c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// roundTrip writes msg on c and reads the same number of bytes back.
func roundTrip(c net.Conn, msg []byte) ([]byte, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	back := make([]byte, len(msg))
	_, err := io.ReadFull(c, back)
	return back, err
}

// probeHandshake is the handshake timeout of quickTransport's transports:
// a peer's conns older than it are probed when the peer connects anew.
const probeHandshake = time.Second

// quickTransport listens as name on listen (advertising advertise, if
// given) with a handshake timeout of probeHandshake.
func quickTransport(t *testing.T, ca *meshtest.CA, name, listen, advertise string) *mesh.Transport {
	t.Helper()
	tr, err := mesh.Listen(mesh.Config{ListenAddr: listen, AdvertiseAddr: advertise, ServerTLS: ca.ServerTLS(t, name), ClientTLS: ca.ClientTLS(t, name),
		Logger: testLogger(), QUIC: &quic.Config{HandshakeIdleTimeout: probeHandshake}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// twoWayPair makes a, listening on 0.0.0.0 and advertising 127.0.0.2,
// and b on 127.0.0.1: a's packets do not come from the address b dials,
// so a conn each way gives a two live conns to b under one key. It
// returns a's advertised address too.
func twoWayPair(t *testing.T) (a, b *mesh.Transport, aAdvertised string) {
	t.Helper()
	ca := meshtest.NewCA(t, "cluster")
	free, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := free.LocalAddr().(*net.UDPAddr).Port
	free.Close()
	aAdvertised = fmt.Sprintf("127.0.0.2:%d", port)
	a = quickTransport(t, ca, "node-a", fmt.Sprintf("0.0.0.0:%d", port), aAdvertised)
	b = quickTransport(t, ca, "node-b", "127.0.0.1:0", "")
	return a, b, aAdvertised
}
