package driver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A placement is a lease: renewed by its worker it lives on; not renewed
// for a TTL it is re-queued; a renewal for a placement that is not the
// caller's is answered "lost" (against the real FSM).
func TestLeasesLapseUnlessRenewed(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	for _, id := range []string{"n1", "n2"} {
		l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: id}}}})
	}
	l.apply(submitCmd("a"))
	l.apply(submitCmd("b"))
	var mu sync.Mutex
	now := time.UnixMilli(1_000_000)
	var requeued []string
	d := New(Config{
		State:    l.fsm.State(),
		IsLeader: true,
		LeaseTTL: 10 * time.Second,
		Apply: func(_ context.Context, c *raftpb.Command) error {
			for _, r := range c.GetSchedulerRound().GetRequeues() {
				requeued = append(requeued, r.Id)
			}
			l.apply(c)
			return nil
		},
		Workers: func() []Worker {
			return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}}, {ID: "n2", Alive: true, Slots: map[string]int{"wasm": 1}}}
		},
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
	})
	advance := func(dt time.Duration) {
		mu.Lock()
		now = now.Add(dt)
		mu.Unlock()
		d.Round(context.Background())
		d.Wait()
	}
	advance(0) // places a and b, one per node; their leases start
	advance(time.Second)
	st := l.fsm.State()
	a, _ := st.Job("a")
	b, _ := st.Job("b")
	if a.Phase != consensus.PhaseRunning || b.Phase != consensus.PhaseRunning || a.NodeID == b.NodeID {
		t.Fatalf("a %s on %q, b %s on %q: want both running, on different nodes", a.Phase, a.NodeID, b.Phase, b.NodeID)
	}
	// a's worker renews; b's says nothing (paused, stuck, cut off).
	for range 3 {
		advance(4 * time.Second)
		if lost := d.Renew(a.NodeID, []Lease{{JobID: "a", Attempt: 1}}); len(lost) != 0 {
			t.Fatalf("renewing a: lost %v", lost)
		}
	}
	if len(requeued) != 1 || requeued[0] != "b" {
		t.Fatalf("requeued %v after b went 12s unrenewed with a 10s TTL; want [b]", requeued)
	}
	if a, _ = st.Job("a"); a.Phase != consensus.PhaseRunning || a.Attempt != 1 {
		t.Fatalf("a, renewed all along: %s attempt %d", a.Phase, a.Attempt)
	}
	// b is placed again as attempt 2, not on the silent node; its old
	// worker's renewal of attempt
	// 1 is answered "lost", and so is a renewal from a node that was never
	// given a.
	advance(time.Second)
	silent := b.NodeID
	if b, _ = st.Job("b"); b.Phase != consensus.PhaseQueued {
		t.Fatalf("b after its lease lapsed: %s attempt %d on %s; want queued (the only free slot is on the silent node)", b.Phase, b.Attempt, b.NodeID)
	}
	// The silent node renews again (nothing: it lost b): it takes work.
	d.Renew(silent, nil)
	advance(time.Second)
	if b, _ = st.Job("b"); b.Attempt != 2 || b.Phase != consensus.PhaseRunning {
		t.Fatalf("b after its node renewed: %s attempt %d; want running as attempt 2", b.Phase, b.Attempt)
	}
	other := "n1"
	if a.NodeID == "n1" {
		other = "n2"
	}
	lost := d.Renew(other, []Lease{{JobID: "b", Attempt: 1}, {JobID: "a", Attempt: 1}})
	if len(lost) != 2 {
		t.Fatalf("stale and foreign renewals: lost %v; want both", lost)
	}
}

// Prefetch applies in full only while a kind's jobs are short: before any
// result, and while they take a while, a worker holds at most one waiting
// job per slot; once they take long, none.
func TestPrefetchFollowsJobLength(t *testing.T) {
	d := New(Config{Prefetch: map[string]int{"wasm": 4}})
	if got := d.prefetch()["wasm"]; got != 1 {
		t.Fatalf("before any result: prefetch %d, want 1", got)
	}
	d.mu.Lock()
	for range 50 {
		d.observeRun("wasm", 20)
	}
	d.mu.Unlock()
	if got := d.prefetch()["wasm"]; got != 4 {
		t.Fatalf("short jobs: prefetch %d, want 4", got)
	}
	d.mu.Lock()
	for range 200 {
		d.observeRun("wasm", 500)
	}
	d.mu.Unlock()
	if got := d.prefetch()["wasm"]; got != 1 {
		t.Fatalf("neither short nor long jobs: prefetch %d, want 1", got)
	}
	// Long jobs get none: a placement held behind a busy slot would wait
	// a whole run while another node had a free one (a user trial).
	d.mu.Lock()
	for range 200 {
		d.observeRun("wasm", 2000)
	}
	d.mu.Unlock()
	if got := d.prefetch()["wasm"]; got != 0 {
		t.Fatalf("long jobs: prefetch %d, want 0", got)
	}
	if got := New(Config{Prefetch: map[string]int{"wasm": 0}}).prefetch()["wasm"]; got != 0 {
		t.Fatalf("prefetch off: %d", got)
	}
}

// Array tasks prefetch about taskQueueBudget of work per slot by their
// array's average run: one before any of its tasks ended, the configured
// depth for short tasks, fewer as they get longer, down to one at once
// when long runs follow short ones; and a new array starts at one
// whatever the arrays before it ran.
func TestArrayPrefetchFollowsTaskRun(t *testing.T) {
	d := New(Config{ArrayPrefetch: map[string]int{"wasm": 32}})
	depthOf := func(array string) int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.arrayDepth("wasm", array)
	}
	depth := func() int { return depthOf("arr") }
	if got := depth(); got != 1 {
		t.Fatalf("before any task ended: %d per slot, want 1", got)
	}
	observeOn := func(array string, us int64, n int) {
		d.mu.Lock()
		for range n {
			d.observeTaskRun(array, us)
		}
		d.mu.Unlock()
	}
	observe := func(us int64, n int) { observeOn("arr", us, n) }
	observe(0, 1) // no run time (an older worker): ignored
	if got := depth(); got != 1 {
		t.Fatalf("after a result without its run time: %d per slot, want 1", got)
	}
	observe(500, 1) // 0.5 ms tasks: 200 fit the budget, capped at 32
	if got := depth(); got != 32 {
		t.Fatalf("short tasks: %d per slot, want the configured 32", got)
	}
	if got := depthOf("next"); got != 1 {
		t.Fatalf("a new array after short tasks: %d per slot, want 1 until its own first result", got)
	}
	observe(10_000, 40) // 10 ms tasks: 10 fit
	if got := depth(); got != 10 {
		t.Fatalf("10 ms tasks: %d per slot, want 10", got)
	}
	observe(500, 1) // one shorter run moves the average a little
	if got := depth(); got != 10 {
		t.Fatalf("one 0.5 ms run after 10 ms ones: %d per slot, want still 10", got)
	}
	d = New(Config{ArrayPrefetch: map[string]int{"wasm": 32}})
	observe(500, 100)
	observe(300_000, 1) // one longer run counts at half weight at once
	if got := depth(); got != 1 {
		t.Fatalf("one 300 ms run after 0.5 ms ones: %d per slot, want 1", got)
	}
	d = New(Config{ArrayPrefetch: map[string]int{"wasm": 32}})
	observe(500, 100)
	observe(30_000_000, 1) // one 30 s task after many short ones
	if got := depth(); got != 1 {
		t.Fatalf("a long task after short ones: %d per slot, want 1 at once", got)
	}
	// Arrays are remembered up to maxArrayRuns, the one least recently
	// heard of forgotten first: a0 reports again, a1 does not.
	d = New(Config{ArrayPrefetch: map[string]int{"wasm": 32}})
	for i := range maxArrayRuns + 1 {
		observeOn(fmt.Sprint("a", i), 500, 1)
		if i == maxArrayRuns-1 {
			observeOn("a0", 500, 1)
		}
	}
	newest := fmt.Sprint("a", maxArrayRuns)
	if len(d.taskRuns) != maxArrayRuns || depthOf("a0") != 32 || depthOf("a1") != 1 || depthOf(newest) != 32 {
		t.Fatalf("%d arrays remembered, a0 at %d, a1 at %d, the newest at %d: want %d, a0 kept (32), a1 forgotten (1), the newest at 32",
			len(d.taskRuns), depthOf("a0"), depthOf("a1"), depthOf(newest), maxArrayRuns)
	}
}
