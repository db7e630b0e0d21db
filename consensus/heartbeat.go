package consensus

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// gatedTransport is raft's NetworkTransport with a gate around the heartbeat
// handler raft installs. The transport runs heartbeats on its connection
// goroutines, not raft's, so raft.Shutdown does not wait for one already
// past its shutdown check; such a heartbeat carrying a new term then writes
// the term to the stable store, and raft panics if Close has closed bolt
// meanwhile ("failed to save current term: database not open"). Close
// shuts the gate after raft stops: it waits for heartbeats in progress and
// turns later ones away, and only then closes the stores. It also answers
// a leader's repeated empty appends itself (quiet.go).
type gatedTransport struct {
	*raft.NetworkTransport
	gate  heartbeatGate
	quiet *quietAppends
}

// AppendEntries implements raft.Transport.
func (t *gatedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.quiet.answer(target, args, resp) {
		return nil
	}
	at := time.Now()
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	t.quiet.sent(target, args, resp, err, at)
	return err
}

// SetHeartbeatHandler implements raft.Transport.
func (t *gatedTransport) SetHeartbeatHandler(fn func(raft.RPC)) {
	t.NetworkTransport.SetHeartbeatHandler(t.gate.wrap(fn))
}

// heartbeatGate lets handler calls through until closed.
type heartbeatGate struct {
	mu     sync.RWMutex // read-held by each call in progress
	closed bool
}

// wrap returns fn behind the gate (nil stays nil: no handler).
func (g *heartbeatGate) wrap(fn func(raft.RPC)) func(raft.RPC) {
	if fn == nil {
		return nil
	}
	return func(rpc raft.RPC) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		if g.closed {
			return // unanswered, as raft leaves heartbeats after Shutdown
		}
		fn(rpc)
	}
}

// close waits for the calls in progress and refuses later ones.
func (g *heartbeatGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
