package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Forwards in flight are ended when leadership moves away from the node
// they went to, and only then: one already sent to the new leader goes on.
// A non-idempotent one gets movedGrace for the former leader to answer.
func TestForwardsEndWhenTheLeaderMoves(t *testing.T) {
	var f forwards
	leader := func(id string) func() string { return func() string { return id } }
	cancelled := func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return errors.Is(context.Cause(ctx), errLeaderMoved)
		default:
			return false
		}
	}

	toA, doneA := f.start(context.Background(), "A", true, leader("A"))
	toB, doneB := f.start(context.Background(), "B", true, leader("B"))
	f.moved("B")
	if !cancelled(toA) {
		t.Fatal("a read in flight to the former leader A was not ended when B took over")
	}
	if cancelled(toB) {
		t.Fatal("a read in flight to the new leader B was ended")
	}
	doneA()
	doneB()

	// The leader moved between reading it and registering: ended at once.
	stale, done := f.start(context.Background(), "A", true, leader("B"))
	if !cancelled(stale) {
		t.Fatal("a forward registered after the move away from its target was not ended")
	}
	done()

	// A write gets movedGrace.
	w, doneW := f.start(context.Background(), "A", false, leader("A"))
	start := time.Now()
	f.moved("")
	if cancelled(w) {
		t.Fatal("a write to the former leader was ended at once; it gets movedGrace to be answered")
	}
	select {
	case <-w.Done():
	case <-time.After(10 * movedGrace):
		t.Fatal("a write to the former leader was never ended")
	}
	if !cancelled(w) || time.Since(start) < movedGrace {
		t.Fatalf("write ended after %s (cause %v)", time.Since(start), context.Cause(w))
	}
	doneW()

	// Ended forwards are forgotten.
	if len(f.m) != 0 {
		t.Fatalf("%d forwards still registered", len(f.m))
	}
}
