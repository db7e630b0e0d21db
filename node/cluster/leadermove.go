package cluster

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Forwards end when the leader moves.
//
// A command forwarded to the leader waits for its answer up to the
// caller's deadline (10 s by default). When that leader dies without a
// word (SIGKILL, power loss), nothing closes the connection at once: QUIC
// notices only at its idle timeout. So the workers' results and the
// submits in flight waited out their whole deadline while a new leader,
// elected in under a second, had nothing to do: every result stalled for
// ~10 s after the loss of a leader. Now a forward in flight to a node that
// is no longer the leader this node follows is cancelled, and the caller
// goes round again (an idempotent request) or hears that the outcome is
// unknown (any other, as before, only sooner).
//
// Only forwards to another node than the new leader are cancelled (raft
// updates the leader before the observation arrives, so a forward may
// already be on its way to the new one). A request that is not idempotent
// gets movedGrace first: an old leader that is alive (a planned handover)
// answers within milliseconds, and its answer beats "unknown outcome".

// errLeaderMoved is the cause of a forward cancelled by a leader change.
var errLeaderMoved = errors.New("the leader changed while the request was in flight")

// movedGrace is how long a non-idempotent forward to a former leader may
// still be answered after the leadership moved.
const movedGrace = time.Second

// forwards holds the forwards in flight, by the leader they went to.
type forwards struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]*forward
}

type forward struct {
	target     string
	idempotent bool
	cancel     context.CancelCauseFunc
}

// start registers a forward to target (the leader as read just before)
// and returns its context, cancelled (cause errLeaderMoved) if leadership
// moves away from target; current is read after registering, so a move
// that happened meanwhile is not missed. done must be called when the
// forward ends.
func (f *forwards) start(ctx context.Context, target string, idempotent bool, current func() string) (_ context.Context, done func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	fw := &forward{target: target, idempotent: idempotent, cancel: cancel}
	f.mu.Lock()
	if f.m == nil {
		f.m = map[uint64]*forward{}
	}
	key := f.next
	f.next++
	f.m[key] = fw
	f.mu.Unlock()
	if current() != target {
		f.end(fw)
	}
	return cctx, func() {
		f.mu.Lock()
		delete(f.m, key)
		f.mu.Unlock()
		cancel(nil)
	}
}

// moved ends the forwards in flight to any node but leader ("" when none
// is known).
func (f *forwards) moved(leader string) {
	f.mu.Lock()
	var gone []*forward
	for _, fw := range f.m {
		if fw.target != leader {
			gone = append(gone, fw)
		}
	}
	f.mu.Unlock()
	for _, fw := range gone {
		f.end(fw)
	}
}

// end cancels fw at once, or after movedGrace if it is not idempotent.
func (f *forwards) end(fw *forward) {
	if fw.idempotent {
		fw.cancel(errLeaderMoved)
		return
	}
	time.AfterFunc(movedGrace, func() { fw.cancel(errLeaderMoved) })
}
