package wasm

import (
	"container/heap"
	"context"
	"sync"

	"github.com/palyra-mesh/palyra/runtime"
)

// gate admits at most n runs at once; runs waiting for a slot are admitted
// in runtime.Order (priority, then acceptance, then task index), not in
// the order their goroutines happened to arrive: placements reach a
// worker in bursts (prefetch), and a job array's task 3 should not start
// before task 1, nor a queued priority-100 job after priority-0 tasks
// that wait beside it.
type gate struct {
	mu      sync.Mutex
	n, used int
	waiting waiters
	arrived uint64 // ties between equal orders go by arrival
}

type waiter struct {
	order   runtime.Order
	arrival uint64
	ready   chan struct{} // closed when admitted
	index   int           // in the heap; -1 once removed
}

func newGate(n int) *gate { return &gate{n: n} }

// acquire waits for a slot; it fails with ctx's error or when done closes.
// queued, if not nil, is called once the run is admitted or waits in line.
func (g *gate) acquire(ctx context.Context, done <-chan struct{}, o runtime.Order, queued func()) error {
	g.mu.Lock()
	if g.used < g.n && len(g.waiting) == 0 {
		g.used++
		g.mu.Unlock()
		if queued != nil {
			queued()
		}
		return nil
	}
	g.arrived++
	w := &waiter{order: o, arrival: g.arrived, ready: make(chan struct{})}
	heap.Push(&g.waiting, w)
	g.mu.Unlock()
	if queued != nil {
		queued()
	}
	var err error
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-done:
		err = context.Canceled
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.index < 0 { // admitted meanwhile: hand the slot on
		g.releaseLocked()
		return err
	}
	heap.Remove(&g.waiting, w.index)
	return err
}

// tryAcquire takes a slot if one is free and no run waits for one.
func (g *gate) tryAcquire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.used < g.n && len(g.waiting) == 0 {
		g.used++
		return true
	}
	return false
}

// release frees a slot, admitting the first waiter in order.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseLocked()
}

func (g *gate) releaseLocked() {
	if len(g.waiting) > 0 {
		w := heap.Pop(&g.waiting).(*waiter)
		close(w.ready) // the slot passes to w: used is unchanged
		return
	}
	g.used--
}

// inUse is how many slots are taken (tests).
func (g *gate) inUse() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.used
}

// waiters is a min-heap by order, then arrival.
type waiters []*waiter

func (h waiters) Len() int { return len(h) }
func (h waiters) Less(i, j int) bool {
	if h[i].order != h[j].order {
		return h[i].order.Before(h[j].order)
	}
	return h[i].arrival < h[j].arrival
}
func (h waiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiters) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
