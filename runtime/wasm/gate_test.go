package wasm

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
)

// TestGateAdmitsInOrder: with its one slot taken, waiters are admitted by
// priority, then acceptance, then task index, whatever order they came
// in; a waiter that gives up is skipped, and one admitted as it gave up
// hands its slot on.
func TestGateAdmitsInOrder(t *testing.T) {
	g := newGate(1)
	ctx := context.Background()
	if err := g.acquire(ctx, nil, runtime.Order{}, nil); err != nil {
		t.Fatal(err)
	}
	orders := map[string]runtime.Order{
		"array.2": {Seq: 10, Index: 2}, "array.0": {Seq: 10, Index: 0}, "urgent": {Priority: 100, Seq: 50},
		"array.1": {Seq: 10, Index: 1}, "older": {Seq: 5}, "gives-up": {Priority: 200, Seq: 60},
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	for i, name := range []string{"array.2", "array.0", "urgent", "gives-up", "array.1", "older"} { // arrival order
		c := ctx
		if name == "gives-up" {
			c = cctx
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.acquire(c, nil, orders[name], nil); err != nil {
				if name != "gives-up" {
					t.Errorf("%s: %v", name, err)
				}
				return
			}
			mu.Lock()
			got = append(got, name)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			g.release()
		}()
		waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting) == i+1 }) // queued, in this order
	}
	cancel()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting) == 5 })
	g.release() // the first holder goes: the rest run one by one
	wg.Wait()
	want := []string{"urgent", "older", "array.0", "array.1", "array.2"}
	if !slices.Equal(got, want) {
		t.Fatalf("admitted %v, want %v", got, want)
	}
	if g.inUse() != 0 {
		t.Fatalf("%d slots in use after every run", g.inUse())
	}

	// A waiter admitted just as its context ends passes the slot on.
	h := newGate(1)
	h.acquire(ctx, nil, runtime.Order{}, nil)
	c2, cancel2 := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- h.acquire(c2, nil, runtime.Order{}, nil) }()
	waitFor(t, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.waiting) == 1 })
	h.mu.Lock()
	cancel2()
	h.releaseLocked() // admitted while cancelled
	h.mu.Unlock()
	if err := <-errc; err == nil {
		h.release()
	}
	if h.inUse() != 0 {
		t.Fatalf("a slot leaked: %d in use", h.inUse())
	}
}

// queued is called once a run holds its place: at once when it gets a
// slot, and as soon as it waits in line when it does not.
func TestGateSaysWhenQueued(t *testing.T) {
	g := newGate(1)
	ctx := context.Background()
	var first, second atomic.Bool
	if err := g.acquire(ctx, nil, runtime.Order{}, func() { first.Store(true) }); err != nil || !first.Load() {
		t.Fatalf("admitted at once: err %v, queued called %v", err, first.Load())
	}
	done := make(chan error, 1)
	go func() { done <- g.acquire(ctx, nil, runtime.Order{Index: 1}, func() { second.Store(true) }) }()
	deadline := time.Now().Add(10 * time.Second)
	for !second.Load() {
		if time.Now().After(deadline) {
			t.Fatal("queued not called for a run waiting in line")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the second run got the slot while the first held it: %v", err)
	default:
	}
	g.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
