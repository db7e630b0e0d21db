package consensus

import (
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// The gate waits for a heartbeat in progress before it closes, and lets
// none through after: the stores Close shuts next are never written by a
// heartbeat.
func TestHeartbeatGate(t *testing.T) {
	var g heartbeatGate
	if g.wrap(nil) != nil {
		t.Fatal("a nil handler was wrapped into a non-nil one")
	}
	var calls atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	h := g.wrap(func(raft.RPC) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
	})
	done := make(chan struct{})
	go func() { h(raft.RPC{}); close(done) }()
	<-entered
	// While the heartbeat runs the gate cannot close: close needs the
	// lock the call holds.
	if g.mu.TryLock() {
		t.Fatal("the gate could close while a heartbeat was in progress")
	}
	closed := make(chan struct{})
	go func() { g.close(); close(closed) }()
	close(release)
	<-done
	<-closed
	h(raft.RPC{})
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times; want once (before close) and never after", n)
	}
}

// Open wires the gate: raft's heartbeat handler goes through it, and a
// closed store answers no heartbeat.
func TestStoreGatesHeartbeats(t *testing.T) {
	s := openStore(t, t.TempDir(), "n-1", true)
	waitLeader(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !s.transport.gate.closed {
		t.Fatal("Close left the heartbeat gate open")
	}
}
