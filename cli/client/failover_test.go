package client_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// deadAddrs returns two addresses where no node answers: a UDP socket that
// reads nothing (a machine that went silent) and a closed port.
func deadAddrs(t *testing.T) (silent, closed string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	gone, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed = gone.LocalAddr().String()
	gone.Close()
	return pc.LocalAddr().String(), closed
}

func startNode(t *testing.T) (*node.Node, *identity.Credential) {
	t.Helper()
	n, err := node.Start(context.Background(), node.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Fast: true,
		BrowserSlots: -1, WasmSlots: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		WasmCacheDir: filepath.Join(os.TempDir(), "palyra-client-test-compile-cache")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cred, err := identity.LoadCredential(n.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	return n, cred
}

// A client given several addresses connects to the one that answers, past
// dead ones, and says which it reached.
func TestClientSkipsDeadAddresses(t *testing.T) {
	n, cred := startNode(t)
	silent, closed := deadAddrs(t)
	cl, err := client.NewCluster([]string{silent, closed, n.Addr()}, cred, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
	if err != nil {
		t.Fatalf("status through [%s %s %s]: %v", silent, closed, n.Addr(), cl.Explain(err))
	}
	if resp.Msg.NodeId != n.ID() || cl.Answered() != n.Addr() {
		t.Fatalf("served by %s, answered %q; want %s at %s", resp.Msg.NodeId, cl.Answered(), n.ID(), n.Addr())
	}
	// The next connection tries the address that answered first.
	cl.Close()
	if _, err := cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{})); err == nil {
		t.Fatal("a closed client still calls")
	}
}

// When no address answers, the error names every one of them and carries
// the caller's hint.
func TestClientUnreachableNamesEveryAddress(t *testing.T) {
	_, cred := startNode(t)
	silent, closed := deadAddrs(t)
	const hint = "check the nodes listed above"
	cl, err := client.NewCluster([]string{silent, closed}, cred, client.Options{DialTimeout: 500 * time.Millisecond, UnreachableHint: hint})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
	if err == nil {
		t.Fatal("status answered with no node running")
	}
	e := cl.Explain(err)
	if e.Code != "unreachable" || !strings.Contains(e.Message, silent) || !strings.Contains(e.Message, closed) || e.Hint != hint {
		t.Fatalf("unreachable error: %+v", e)
	}
	if cl.Answered() != "" {
		t.Fatalf("answered %q with nothing running", cl.Answered())
	}
}

// A node that refuses the credential (another cluster's) is reported as
// such, not as unreachable, even among dead addresses.
func TestClientReportsRefusalOverSilence(t *testing.T) {
	n, _ := startNode(t)
	_, foreign := startNode(t)
	silent, _ := deadAddrs(t)
	cl, err := client.NewCluster([]string{silent, n.Addr()}, foreign, client.Options{DialTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
	if e := cl.Explain(err); err == nil || e.Code != "unauthenticated" || !strings.Contains(e.Message, n.Addr()) {
		t.Fatalf("foreign credential: %v → %+v", err, e)
	}
}

func TestNewClusterRefusesBadAddresses(t *testing.T) {
	if _, err := client.NewCluster(nil, nil, client.Options{}); err == nil {
		t.Fatal("no address accepted")
	}
	if _, err := client.NewCluster([]string{"127.0.0.1:7444", "nonsense"}, nil, client.Options{}); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Fatalf("bad address: %v", err)
	}
}
