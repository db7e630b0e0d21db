package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/testbuf"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// silenceable is a UDP relay in front of a node: the CLI reaches the node
// through it until silence makes it drop every packet both ways, as a
// node SIGKILLed (or a machine unplugged) looks to its clients: no
// connection close, no error, nothing.
type silenceable struct {
	pc     *net.UDPConn
	target *net.UDPAddr
	silent atomic.Bool
	// dropped counts the client's packets of an established connection
	// (QUIC short header) dropped while silent: none means the client was
	// not connected through the relay then. A handshake still going on
	// (long header) is not counted: on a loaded machine the client's dial
	// of the relay can lose the race to another node's, and its
	// retransmissions said "connected" where it was not (a CI run).
	dropped atomic.Int64
	mu      sync.Mutex
	up      map[string]*net.UDPConn // the relay's socket to the node, per client address
}

func newSilenceable(t *testing.T, target string) *silenceable {
	t.Helper()
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &silenceable{pc: pc, target: ta, up: map[string]*net.UDPConn{}}
	t.Cleanup(s.close)
	go s.relay()
	return s
}

func (s *silenceable) addr() string { return s.pc.LocalAddr().String() }

// silence drops everything from now on.
func (s *silenceable) silence() { s.silent.Store(true) }

func (s *silenceable) close() {
	s.pc.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.up {
		u.Close()
	}
}

func (s *silenceable) relay() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := s.pc.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if s.silent.Load() {
			if n > 0 && buf[0]&0x80 == 0 {
				s.dropped.Add(1)
			}
			continue
		}
		s.mu.Lock()
		u := s.up[from.String()]
		if u == nil {
			if u, err = net.DialUDP("udp", nil, s.target); err != nil {
				s.mu.Unlock()
				continue
			}
			s.up[from.String()] = u
			go s.back(u, from)
		}
		s.mu.Unlock()
		u.Write(buf[:n])
	}
}

// back relays the node's packets to the client at to.
func (s *silenceable) back(u *net.UDPConn, to *net.UDPAddr) {
	buf := make([]byte, 64<<10)
	for {
		n, err := u.Read(buf)
		if err != nil {
			return
		}
		if !s.silent.Load() {
			s.pc.WriteToUDP(buf[:n], to)
		}
	}
}

// TestWaitOutlivesASilentNode: a node that vanishes without a word (as a
// SIGKILLed one does) while 'job submit --wait' or 'job watch' follows a
// job through it: the command notices within seconds that nothing comes
// back, follows the job through another node of the cluster (one it
// learned from the cluster: --addr names only the silent one), says so on
// stderr, and ends with the job's result. Before, the stream hung until
// the QUIC idle timeout (8 s of silence), then the command retried only
// the address it was given, for a minute.
func TestWaitOutlivesASilentNode(t *testing.T) {
	c, addrs, _ := threeNodes(t)
	sleep := testwasm.Path(t, "sleep")
	inputs := filepath.Join(t.TempDir(), "inputs")
	if err := os.WriteFile(inputs, []byte("2s\n2s\n2s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// follow runs args through a relay to the third node, silences the
	// relay once following says the command follows the job, and returns
	// how the command ended, how long after the silence, and the relay's
	// address.
	//
	// The scenario needs the command's connection to run through the
	// relay when it goes silent. On a loaded machine it may not: a dial
	// that waits past client.DefaultStagger also tries the next address,
	// and a node that answers first wins. ok is false then, and the
	// caller tries the scenario again: when the relay dropped nothing from
	// the client, or when the command ended without a word about the
	// relay (it followed the job through another node all along; a
	// connection through the relay that lost the dial race may still have
	// sent it a packet or two). A command that ever follows through the
	// relay names it when it loses it; one that would switch away without
	// a word fails every try, and so the test.
	follow := func(t *testing.T, following func(stdout, stderr string) bool, args ...string) (r result, took time.Duration, silentAddr string, ok bool) {
		t.Helper()
		relay := newSilenceable(t, addrs[2])
		var out, errb testbuf.Buffer
		done := make(chan int, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done <- run(ctx, append([]string{"palyra", "--data-dir", c.dir, "--addr", relay.addr()}, args...), strings.NewReader(""), &out, &errb)
		}()
		deadline := time.Now().Add(30 * time.Second)
		for !following(out.String(), errb.String()) {
			select {
			case code := <-done:
				t.Fatalf("%v ended before it followed the job: %+v", args, result{code, out.String(), errb.String()})
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v does not follow the job: %q %q", args, out.String(), errb.String())
			}
		}
		relay.silence()
		silenced := time.Now()
		select {
		case code := <-done:
			r, took := result{code, out.String(), errb.String()}, time.Since(silenced)
			if relay.dropped.Load() == 0 || (r.code == 0 && !strings.Contains(r.stderr, relay.addr())) {
				t.Logf("%v was not connected through the relay when it went silent (ended %s after, %+v): the scenario did not happen", args, took.Round(time.Millisecond), r)
				return r, took, relay.addr(), false
			}
			return r, took, relay.addr(), true
		case <-time.After(30 * time.Second):
			t.Fatalf("%v still waits 30 s after its node went silent (the job ended within 2 s of that): %q %q", args, out.String(), errb.String())
		}
		panic("unreachable")
	}
	// The old stream hung for the QUIC idle timeout (8 s of silence)
	// before anything was tried. The client now closes a connection it
	// has heard nothing from for SilentAfter itself, and says so: that
	// reason, not the idle timeout's ("no answer"), is what is checked,
	// so a slow machine cannot fail this test, nor a regression pass it.
	check := func(t *testing.T, r result, took time.Duration, silent, id string) {
		t.Helper()
		t.Logf("ended %s after the silence; stderr:\n%s", took.Round(time.Millisecond), r.stderr)
		if !strings.Contains(r.stderr, "following "+id+" again through ") {
			t.Errorf("no word on stderr that the command follows %s again, and through which node: %q", id, r.stderr)
		}
		if strings.Contains(r.stderr, "again through "+silent) {
			t.Errorf("followed again through the silent node %s: %q", silent, r.stderr)
		}
		if !strings.Contains(r.stderr, "lost the stream from "+silent+" (nothing heard from it for ") {
			t.Errorf("the command did not give up on the silent node %s itself (it waited for the connection's idle timeout): %q", silent, r.stderr)
		}
	}

	// scenario runs one subtest's scenario until its premise held (at
	// most three times).
	scenario := func(t *testing.T, try func() bool) {
		t.Helper()
		for attempt := 1; !try(); attempt++ {
			if attempt == 3 {
				t.Fatal("three tries, and the command was never connected through the relay when it went silent")
			}
		}
	}

	t.Run("array submit --wait", func(t *testing.T) {
		scenario(t, func() bool {
			r, took, silent, ok := follow(t, func(_, stderr string) bool { return strings.Contains(stderr, " ended (") },
				"job", "submit", "--wasm", sleep, "--inputs", inputs, "--wait")
			if r.code != 0 || r.stdout != "slept 2s\nslept 2s\nslept 2s\n" {
				t.Fatalf("array submit --wait through a node that went silent: %+v", r)
			}
			if !ok {
				return false
			}
			id, _, _ := strings.Cut(strings.TrimPrefix(r.stderr, "array "), ":")
			check(t, r, took, silent, id)
			return true
		})
	})
	t.Run("job watch", func(t *testing.T) {
		scenario(t, func() bool {
			r := c.on(addrs[0], "job", "submit", "--wasm", sleep, "--input", "2s")
			if r.code != 0 {
				t.Fatalf("submit: %+v", r)
			}
			id := strings.TrimSpace(r.stdout)
			r, took, silent, ok := follow(t, func(stdout, _ string) bool { return strings.Contains(stdout, "running") }, "job", "watch", id)
			if r.code != 0 || !strings.Contains(r.stdout, "completed") {
				t.Fatalf("job watch through a node that went silent: %+v", r)
			}
			if ok {
				check(t, r, took, silent, id)
			}
			return ok
		})
	})
	t.Run("submit --wait", func(t *testing.T) {
		// Polled with a client of its own: two CLI commands at once in
		// one process share urfave/cli's flags.
		cred, err := identity.LoadCredential(c.node.Layout().OperatorDir())
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(addrs[0], cred)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var id string
		running := func(string, string) bool { // the job runs: the command follows it
			resp, err := cl.Jobs.ListJobs(context.Background(), connect.NewRequest(&palyrav1.ListJobsRequest{Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING}))
			if err != nil || len(resp.Msg.Jobs) != 1 {
				return false
			}
			id = resp.Msg.Jobs[0].Id
			return true
		}
		scenario(t, func() bool {
			r, took, silent, ok := follow(t, running, "job", "submit", "--wasm", sleep, "--input", "2s", "--wait")
			if r.code != 0 || r.stdout != "slept 2s" {
				t.Fatalf("submit --wait through a node that went silent: %+v", r)
			}
			if ok {
				check(t, r, took, silent, id)
			}
			return ok
		})
	})
	// 'job logs -f' too: it hung on the silent node; now it goes on
	// through another, printing what is new only (the new stream starts
	// from the job's first byte).
	t.Run("job logs -f", func(t *testing.T) {
		scenario(t, func() bool {
			r := c.on(addrs[0], "job", "submit", "--wasm", testwasm.Path(t, "ticker"), "--input", "6 400ms")
			if r.code != 0 {
				t.Fatalf("submit: %+v", r)
			}
			id := strings.TrimSpace(r.stdout)
			r, took, silent, ok := follow(t, func(stdout, _ string) bool { return strings.Contains(stdout, "tick 2\n") }, "job", "logs", "-f", id)
			if r.code != 0 || r.stdout != "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\n" {
				t.Fatalf("job logs -f through a node that went silent: %+v; want every tick once", r)
			}
			for i := 1; i <= 6; i++ {
				if n := strings.Count(r.stderr, fmt.Sprintf("tock %d\n", i)); n != 1 {
					t.Errorf("tock %d printed %d times: %q", i, n, r.stderr)
				}
			}
			if ok {
				check(t, r, took, silent, id)
			}
			return ok
		})
	})
	// Past the 1 MiB of output a worker keeps for its followers, too: the
	// stream opened again starts where the output received ends, so every
	// byte is printed once. (It started from the attempt's first byte,
	// which the worker no longer had: skipping by the count printed lost
	// output, and a gap made some print twice.)
	t.Run("job logs -f past 1 MiB", func(t *testing.T) {
		const count, pad = 16, 150_000 // 2.4 MB, 1.35 MB of it before the silence
		dots := strings.Repeat(".", pad)
		scenario(t, func() bool {
			r := c.on(addrs[0], "job", "submit", "--wasm", testwasm.Path(t, "ticker"), "--input", fmt.Sprintf("%d 1s %d", count, pad), "--max-output", "4MiB")
			if r.code != 0 {
				t.Fatalf("submit: %+v", r)
			}
			id := strings.TrimSpace(r.stdout)
			r, _, silent, ok := follow(t, func(stdout, _ string) bool { return strings.Contains(stdout, "tick 9"+dots+"\n") }, "job", "logs", "-f", id)
			var want strings.Builder
			for i := 1; i <= count; i++ {
				fmt.Fprintf(&want, "tick %d%s\n", i, dots)
			}
			if r.code != 0 || r.stdout != want.String() {
				got := strings.ReplaceAll(r.stdout, dots, "<pad>")
				t.Fatalf("job logs -f of 2.4 MB through a node that went silent: exit %d, stdout (%d bytes, want %d) %q, stderr %q; want every line once",
					r.code, len(r.stdout), want.Len(), got, r.stderr)
			}
			for i := 1; i <= count; i++ {
				if n := strings.Count(r.stderr, fmt.Sprintf("tock %d\n", i)); n != 1 {
					t.Errorf("tock %d printed %d times: %q", i, n, r.stderr)
				}
			}
			if !ok {
				return false
			}
			if strings.Contains(r.stderr, "dropped") {
				t.Errorf("a gap on the way: %q", r.stderr)
			}
			if !strings.Contains(r.stderr, "following "+id+" again through ") || strings.Contains(r.stderr, "again through "+silent) {
				t.Errorf("no word on stderr that the command follows %s again through another node than %s: %q", id, silent, r.stderr)
			}
			return true
		})
	})
}
