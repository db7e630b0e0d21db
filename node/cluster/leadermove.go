package cluster

import (
	"context"
	"errors"
	"sync"
)

// Forwards end when the leader moves.
//
// A command forwarded to the leader waits for its answer up to the
// caller's deadline (10 s by default). When that leader dies without a
// word (SIGKILL, power loss), nothing closes the connection at once: QUIC
// notices only at its idle timeout. So the workers' results and the
// submits in flight waited out their whole deadline while a new leader,
// elected in under a second, had nothing to do: every result stalled for
// ~10 s after the loss of a leader. Now a forward in flight is cancelled as
// soon as this node sees the leadership move (a new leader, or none), and
// the caller goes round again (an idempotent request) or hears that the
// outcome is unknown (any other, as before, only sooner).

// errLeaderMoved is the cause of a forward cancelled by a leader change.
var errLeaderMoved = errors.New("the leader changed while the request was in flight")

// forwards holds the cancel functions of forwards in flight, with the
// leadership generation they were sent in.
type forwards struct {
	mu   sync.Mutex
	gen  uint64 // bumped on every leader change
	next uint64
	m    map[uint64]context.CancelCauseFunc
}

// generation is the current leadership generation: read it before reading
// the leader a forward goes to.
func (f *forwards) generation() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen
}

// start derives a context for a forward sent in generation gen: it is
// cancelled (cause errLeaderMoved) at the next leader change, or at once
// if one came after gen. done must be called when the forward ends.
func (f *forwards) start(ctx context.Context, gen uint64) (_ context.Context, done func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	f.mu.Lock()
	if f.gen != gen {
		f.mu.Unlock()
		cancel(errLeaderMoved)
		return cctx, func() {}
	}
	if f.m == nil {
		f.m = map[uint64]context.CancelCauseFunc{}
	}
	key := f.next
	f.next++
	f.m[key] = cancel
	f.mu.Unlock()
	return cctx, func() {
		f.mu.Lock()
		delete(f.m, key)
		f.mu.Unlock()
		cancel(nil)
	}
}

// moved cancels every forward in flight: the leader changed.
func (f *forwards) moved() {
	f.mu.Lock()
	f.gen++
	m := f.m
	f.m = nil
	f.mu.Unlock()
	for _, cancel := range m {
		cancel(errLeaderMoved)
	}
}
