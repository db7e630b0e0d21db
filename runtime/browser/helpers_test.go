package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwatch"
	"github.com/palyra-mesh/palyra/runtime"
)

// requireChromium fails the test (skips it only under -short) when no
// Chromium is installed: a browser executor that silently is not tested is
// worse than a red test with the fix in its message.
func requireChromium(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode: it starts Chromium")
	}
	p, ok := Detect()
	if !ok {
		t.Fatalf("no Chromium found; %s", InstallHint)
	}
	return p
}

func testLogger() *slog.Logger {
	if os.Getenv("BROWSER_TEST_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newExecutor starts an executor for one test and closes it afterwards.
func newExecutor(t testing.TB, cfg Config) *Executor {
	t.Helper()
	testwatch.Track(t)
	cfg.ExecPath = requireChromium(t)
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			buf := make([]byte, 1<<20)
			t.Errorf("Close: %v\n%s", err, buf[:goruntime.Stack(buf, true)])
		}
	})
	return e
}

var (
	sharedOnce sync.Once
	sharedExec *Executor
	sharedErr  error
)

// shared is one executor reused by tests that do not break it, so the
// suite starts few browsers. TestMain closes it.
func shared(t testing.TB) *Executor {
	t.Helper()
	path := requireChromium(t)
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sharedExec, sharedErr = New(ctx, Config{ExecPath: path, Slots: 2, Logger: testLogger()})
	})
	if sharedErr != nil {
		t.Fatalf("New: %v", sharedErr)
	}
	return sharedExec
}

var (
	variantsMu sync.Mutex
	variants   = map[string]*Executor{}
)

// sharedVariant is like shared for an executor that tweak adjusts before
// its first job; one per name.
func sharedVariant(t testing.TB, name string, tweak func(*Config)) *Executor {
	t.Helper()
	path := requireChromium(t)
	variantsMu.Lock()
	defer variantsMu.Unlock()
	if e, ok := variants[name]; ok {
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Config{ExecPath: path, Logger: testLogger()}
	tweak(&cfg)
	e, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	variants[name] = e
	return e
}

func TestMain(m *testing.M) {
	if d := os.Getenv("PALYRA_FAKE_CHROMIUM_DELAY"); d != "" {
		// This test binary standing in for a slow Chromium (detect_test.go).
		wait, _ := time.ParseDuration(d)
		time.Sleep(wait)
		os.Stdout.WriteString("Chromium 999.0.0.0 (a test's stand-in)\n")
		os.Exit(0)
	}
	code := m.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if sharedExec != nil {
		_ = sharedExec.Close(ctx)
	}
	for _, e := range variants {
		_ = e.Close(ctx)
	}
	os.Exit(code)
}

// script marshals steps into a Spec.Script.
func script(t testing.TB, steps ...map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"steps": steps})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run runs a job with a generous deadline.
func run(t testing.TB, e *Executor, spec runtime.Spec) runtime.Result {
	t.Helper()
	testwatch.Track(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if spec.Timeout == 0 {
		spec.Timeout = 30 * time.Second
	}
	return e.Run(ctx, spec)
}

func mustOK(t testing.TB, r runtime.Result) {
	t.Helper()
	if !r.OK() {
		t.Fatalf("job failed: reason=%q message=%q stderr=%s", r.Reason, r.Message, r.Stderr)
	}
}

func values(t testing.TB, r runtime.Result) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Stdout, &v); err != nil {
		t.Fatalf("stdout %q is not a JSON object: %v", r.Stdout, err)
	}
	return v
}

// blockedOf parses Stderr's blocked-request lines.
func blockedOf(t testing.TB, r runtime.Result) []blockedLine {
	t.Helper()
	var out []blockedLine
	for _, line := range strings.Split(strings.TrimSpace(string(r.Stderr)), "\n") {
		if line == "" {
			continue
		}
		var l blockedLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		out = append(out, l)
	}
	return out
}

// countingServer is an httptest server that counts every request and
// every TCP connection it accepts, to prove a blocked host saw nothing.
type countingServer struct {
	*httptest.Server
	requests atomic.Int64
	conns    atomic.Int64

	mu    sync.Mutex
	heads []*headConn // every accepted connection, to say what it sent
}

// firstBytes lists what each accepted connection sent first: an
// unexpected connection is then seen to be a browser's (an HTTP request
// line, a TLS hello, or nothing, as a preconnect) or another client's.
func (cs *countingServer) firstBytes() []string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []string
	for _, c := range cs.heads {
		c.mu.Lock()
		out = append(out, fmt.Sprintf("%q", c.head))
		c.mu.Unlock()
	}
	return out
}

// headConn keeps the first bytes read from a connection.
type headConn struct {
	net.Conn
	mu   sync.Mutex
	head []byte
}

func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	if room := 48 - len(c.head); room > 0 {
		c.head = append(c.head, p[:min(n, room)]...)
	}
	c.mu.Unlock()
	return n, err
}

// headListener wraps each accepted connection in a headConn.
type headListener struct {
	net.Listener
	cs *countingServer
}

func (l headListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	hc := &headConn{Conn: c}
	l.cs.mu.Lock()
	l.cs.heads = append(l.cs.heads, hc)
	l.cs.mu.Unlock()
	return hc, nil
}

func newCountingServer(t testing.TB, h http.Handler) *countingServer {
	t.Helper()
	return newCountingServerOn(t, "127.0.0.1:0", h)
}

// newCountingServerOn is newCountingServer listening on addr.
func newCountingServerOn(t testing.TB, addr string, h http.Handler) *countingServer {
	t.Helper()
	cs := &countingServer{}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	ln, err := listenQuiet(addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	cs.Listener.Close()
	cs.Listener = headListener{ln, cs}
	cs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			cs.conns.Add(1)
		}
	}
	cs.Start()
	t.Cleanup(cs.Close)
	return cs
}

// listenQuiet listens on addr; a port 0 there becomes a free port below
// the kernel's ephemeral range. A counting server asserts that nothing
// connected to it, and an ephemeral port can be one another process still
// dials: go test runs packages side by side, and a client in another
// package's test (a raft peer of a stopped node, a browser whose page
// outlived its server) can keep dialing a closed server's port, which the
// kernel may hand to this server next. CI once saw a blocked host with
// "0 requests and 1 connections", most likely such a dial (bytes that are
// not HTTP get a 400 before any handler runs). Port 0 never yields a port
// below the range, so no stale address of another process lands there.
func listenQuiet(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" {
		return net.Listen("tcp", addr)
	}
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	// Above the well-known ports and every port Chromium refuses as unsafe
	// (the highest is 10080).
	const floor = 20000
	if low-floor < 1000 {
		return net.Listen("tcp", addr) // no room below the range: take what the kernel gives
	}
	var last error
	for range 64 {
		p := floor + rand.IntN(low-floor)
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			return ln, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no free port below the ephemeral range %d: %w", low, last)
}

// port is the server's port as a string.
func (cs *countingServer) port() string {
	_, p, _ := net.SplitHostPort(cs.Listener.Addr().String())
	return p
}

// loopbackSpec grants exactly 127.0.0.1, which needs AllowPrivate.
func loopbackSpec(s []byte) runtime.Spec {
	return runtime.Spec{Script: s, AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true}
}

// dumpArtifacts writes a job's artifacts to $BROWSER_TEST_DUMP, for a
// human to look at.
func dumpArtifacts(t testing.TB, r runtime.Result) {
	dir := os.Getenv("BROWSER_TEST_DUMP")
	if dir == "" {
		return
	}
	for _, a := range r.Artifacts {
		if err := os.WriteFile(filepath.Join(dir, a.Name), a.Data, 0o644); err != nil {
			t.Log(err)
		}
	}
}

func html(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, "<!doctype html><html><head><meta charset=utf-8><title>t</title></head><body>"+body+"</body></html>")
}
