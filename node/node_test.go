package node_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/testwatch"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// sharedWasmCache is the compilation cache of every node the tests start.
// wazero keys entries by module hash and its own version and writes them
// atomically, so concurrent test processes may share it.
var sharedWasmCache = filepath.Join(os.TempDir(), "palyra-node-test-compile-cache")

func start(t testing.TB, cfg node.Config) *node.Node {
	t.Helper()
	testwatch.Track(t)
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.Fast = true
	if cfg.WasmCacheDir == "" {
		// Shared by every test node (and later runs): a cold Go guest
		// takes ~15 s to compile under -race, which on a loaded 2-core
		// machine starves the cluster's timers when every node does it.
		cfg.WasmCacheDir = sharedWasmCache
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.BrowserSlots == 0 {
		cfg.BrowserSlots = -1 // browser tests opt in
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Close's error is logged, not failed on: a test may have broken
		// the node on purpose. A part that would not stop is named here.
		if err := n.Close(); err != nil {
			t.Logf("closing node %s: %v", n.ID(), err)
		}
	})
	return n
}

// A certificate near expiry is renewed by the running node: new serial on
// disk and in the handshake, no restart, and a connection opened before
// the renewal keeps working after it.
func TestCertificateRenewsWithoutRestart(t *testing.T) {
	n := start(t, node.Config{CertTTL: 6 * time.Second})
	first, err := identity.LoadCredential(n.Layout().NodeCredDir())
	if err != nil {
		t.Fatal(err)
	}
	op, err := identity.LoadCredential(n.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(n.Addr(), op)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := callCtx(t)
	if _, err := cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{})); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var renewed *identity.Credential
	for time.Now().Before(deadline) {
		c, err := identity.LoadCredential(n.Layout().NodeCredDir())
		if err == nil && c.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
			renewed = c
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if renewed == nil {
		t.Fatal("node certificate was not renewed")
	}
	if !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) || renewed.Principal != first.Principal {
		t.Fatalf("renewed cert: %v → %v", first.Leaf.NotAfter, renewed.Leaf.NotAfter)
	}
	// The old connection still works, and keeps working past the first
	// certificate's expiry.
	time.Sleep(time.Until(first.Leaf.NotAfter) + time.Second)
	if _, err := cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{})); err != nil {
		t.Fatalf("existing connection after renewal: %v", err)
	}
	// A new connection sees the renewed certificate, with a renewed
	// operator credential as well (the CA node renews it).
	op2, err := identity.LoadCredential(n.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl2, err := client.New(n.Addr(), op2)
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	if _, err := cl2.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{})); err != nil {
		t.Fatalf("new connection after the first certificate expired: %v", err)
	}
}

// callLimit bounds every API call a test makes, counted from its first
// call: a call that would wait for ever (a job that never ends, a stream
// that never closes) fails the test with the call's error instead.
const callLimit = 5 * time.Minute

var callCtxs sync.Map // testing.TB → context.Context

// callCtx is the context of t's API calls: it ends callLimit after t's
// first call, or when t ends.
func callCtx(t testing.TB) context.Context {
	if c, ok := callCtxs.Load(t); ok {
		return c.(context.Context)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callLimit)
	if c, loaded := callCtxs.LoadOrStore(t, ctx); loaded {
		cancel()
		return c.(context.Context)
	}
	t.Cleanup(func() { cancel(); callCtxs.Delete(t) })
	return ctx
}

// A data dir records the newest data format a binary used on it, and a
// binary that knows an older one refuses to start there (a downgraded node
// applied a newer version's entries differently, and its state diverged
// silently), naming what to do; the data dir is left as it was.
func TestNewerDataVersionIsRefused(t *testing.T) {
	dir := t.TempDir()
	n := start(t, node.Config{DataDir: dir})
	l := n.Layout()
	n.Close()
	st, err := l.ReadState()
	if err != nil || st.DataVersion != node.DataVersion {
		t.Fatalf("node.json data_version %d (%v), want %d", st.DataVersion, err, node.DataVersion)
	}
	st.DataVersion = node.DataVersion + 1 // as a newer binary leaves it
	if err := l.WriteState(st); err != nil {
		t.Fatal(err)
	}
	_, err = node.Start(context.Background(), node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, BrowserSlots: -1, WasmCacheDir: sharedWasmCache,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "newer palyra") || !strings.Contains(err.Error(), "start the newer binary") {
		t.Fatalf("start on a newer data dir: %v", err)
	}
	if after, _ := l.ReadState(); after.DataVersion != node.DataVersion+1 {
		t.Fatalf("the refused start rewrote node.json: data_version %d", after.DataVersion)
	}
}
