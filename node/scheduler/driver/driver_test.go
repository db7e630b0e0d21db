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

// fakeState is an in-memory State for the driver (the FSM's indexes are
// tested in consensus; here only what the driver reads matters).
type fakeState struct {
	queued   []consensus.Job
	running  map[string][]consensus.Job // by node
	oldest   int64                      // OldestEnded (0: none)
	prunable uint64
}

func (f *fakeState) Watch(string) <-chan struct{} { return make(chan struct{}) }
func (f *fakeState) Queued(kind string, fn func(consensus.Job) bool) {
	for _, j := range f.queued {
		if j.Kind == kind && !fn(j) {
			return
		}
	}
}
func (f *fakeState) QueuedKinds() []string                    { return []string{"wasm"} }
func (f *fakeState) RunningCounts() map[string]map[string]int { return map[string]map[string]int{} }
func (f *fakeState) RunningOn(node string) []consensus.Job    { return f.running[node] }
func (f *fakeState) RunningNodes() []string {
	var out []string
	for n := range f.running {
		out = append(out, n)
	}
	return out
}
func (f *fakeState) DeadlinesBefore(int64, int) []consensus.Job {
	return nil
}
func (f *fakeState) Member(kind, id string) (consensus.Member, bool) {
	return consensus.Member{Kind: kind, ID: id}, true
}
func (f *fakeState) Job(id string) (consensus.Job, bool) {
	for _, j := range f.queued {
		if j.ID == id {
			return j, true
		}
	}
	return consensus.Job{}, false
}
func (f *fakeState) OldestEnded() (int64, bool) { return f.oldest, f.oldest > 0 }
func (f *fakeState) Prunable() uint64           { return f.prunable }

func (f *fakeState) Retention() int64 { return consensus.DefaultRetentionMS }

// oneRound runs one scheduling round over st and workers and returns the
// round it committed (it must commit exactly one).
func oneRound(t *testing.T, st State, workers []Worker) *raftpb.SchedulerRound {
	t.Helper()
	var mu sync.Mutex
	var rounds []*raftpb.SchedulerRound
	d := New(Config{
		State: st,
		Apply: func(_ context.Context, c *raftpb.Command) error {
			mu.Lock()
			defer mu.Unlock()
			rounds = append(rounds, c.GetSchedulerRound())
			return nil
		},
		Workers: func() []Worker { return workers },
		Now:     func() time.Time { return time.UnixMilli(1_000_000) },
	})
	d.Round(context.Background())
	d.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(rounds) != 1 {
		t.Fatalf("%d rounds committed, want 1", len(rounds))
	}
	return rounds[0]
}

// Jobs that cannot be placed (no node matches their constraint) at the
// head of the queue do not starve the placeable ones behind them, however
// many there are; the unplaceable ones still get a pending reason.
func TestUnplaceableHeadDoesNotStarveTheQueue(t *testing.T) {
	st := &fakeState{}
	for i := range 5000 {
		st.queued = append(st.queued, consensus.Job{ID: fmt.Sprint("stuck-", i), Kind: "wasm", CommitIndex: uint64(i + 1),
			Constraints: map[string]string{"zone": "nowhere"}})
	}
	st.queued = append(st.queued, consensus.Job{ID: "free", Kind: "wasm", CommitIndex: 9999})
	r := oneRound(t, st, []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 2}}})
	if len(r.Placements) != 1 || r.Placements[0].Id != "free" || r.Placements[0].NodeId != "n1" {
		t.Fatalf("placements %v: want the one placeable job on n1", r.Placements)
	}
	if len(r.Pending) == 0 || len(r.Pending) > maxReasonUpdates {
		t.Fatalf("%d pending reasons; want some, at most %d", len(r.Pending), maxReasonUpdates)
	}
}

// Each kind is its own queue: a browser job behind more wasm jobs than a
// round examines is placed as soon as browser capacity is free, though no
// wasm job can be.
func TestEachKindQueuesOnItsOwn(t *testing.T) {
	st := &fakeState{}
	for i := range maxExamine + 5000 {
		st.queued = append(st.queued, consensus.Job{ID: fmt.Sprint("w-", i), Kind: "wasm", CommitIndex: uint64(i + 1)})
	}
	st.queued = append(st.queued, consensus.Job{ID: "page", Kind: "browser", CommitIndex: 1 << 30})
	kinds := func() []string { return []string{"browser", "wasm"} }
	r := oneRound(t, &kindState{fakeState: st, kinds: kinds}, []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"browser": 1}}})
	if len(r.Placements) != 1 || r.Placements[0].Id != "page" {
		t.Fatalf("round %v: want the browser job placed", r)
	}
}

// kindState reports the kinds its queue holds.
type kindState struct {
	*fakeState
	kinds func() []string
}

func (k *kindState) QueuedKinds() []string { return k.kinds() }

// A lagging worker (alive, but its replica trails the leader's log) gets
// no new work, since it would not see the placement in time; the work it
// runs is left alone: it still reports its results.
func TestLaggingWorkerGetsNoNewWork(t *testing.T) {
	st := &fakeState{running: map[string][]consensus.Job{
		"lagging": {{ID: "old", Kind: "wasm", Phase: consensus.PhaseRunning, NodeID: "lagging", Attempt: 1}},
	}}
	for i := range 6 {
		st.queued = append(st.queued, consensus.Job{ID: fmt.Sprint("q-", i), Kind: "wasm", CommitIndex: uint64(i + 1)})
	}
	r := oneRound(t, st, []Worker{
		{ID: "lagging", Alive: true, Lagging: true, Slots: map[string]int{"wasm": 8}},
		{ID: "ok", Alive: true, Slots: map[string]int{"wasm": 2}},
	})
	if len(r.Placements) == 0 {
		t.Fatal("nothing placed on the healthy worker")
	}
	for _, p := range r.Placements {
		if p.NodeId != "ok" {
			t.Errorf("job %s placed on %s, want only the healthy worker", p.Id, p.NodeId)
		}
	}
	if len(r.Requeues) != 0 {
		t.Errorf("requeues %v: the lagging worker's running job must be left alone", r.Requeues)
	}
}

// countState is fakeState with wasm jobs running per node.
type countState struct {
	*fakeState
	counts map[string]map[string]int
}

func (c *countState) RunningCounts() map[string]map[string]int { return c.counts }

// A job waiting for a slot blocks prefetch for the array tasks behind it
// in the queue: a priority-10 job on a node whose one slot and prefetch
// hold priority-0 tasks is not overtaken by more of them (they took the
// prefetch as each ended, and the job waited for the whole array); with
// nothing waiting, the tasks prefetch as before.
func TestWaitingJobBlocksPrefetchBehindIt(t *testing.T) {
	round := func(queued []consensus.Job) *raftpb.SchedulerRound {
		st := &countState{fakeState: &fakeState{queued: queued}, counts: map[string]map[string]int{"n1": {"wasm": 5}}}
		var got *raftpb.SchedulerRound
		d := New(Config{
			State: st,
			Apply: func(_ context.Context, c *raftpb.Command) error { got = c.GetSchedulerRound(); return nil },
			Workers: func() []Worker {
				return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}}}
			},
			Now:           func() time.Time { return time.UnixMilli(1_000_000) },
			ArrayPrefetch: map[string]int{"wasm": 8},
		})
		d.mu.Lock()
		d.observeTaskRun("arr", 1000) // 1 ms tasks: the full depth
		d.mu.Unlock()
		d.Round(context.Background())
		d.Wait()
		return got
	}
	var tasks []consensus.Job
	for i := range 4 {
		tasks = append(tasks, consensus.Job{ID: fmt.Sprint("arr.", i), Kind: "wasm", ArrayID: "arr", ArrayIndex: uint32(i), CommitIndex: 50})
	}
	if r := round(tasks); r == nil || len(r.Placements) != 4 {
		t.Fatalf("array tasks alone: %v, want the 4 prefetched (capacity 9, 5 running)", r)
	}
	urgent := consensus.Job{ID: "urgent", Kind: "wasm", Priority: 10, CommitIndex: 60}
	if r := round(append([]consensus.Job{urgent}, tasks...)); r != nil && len(r.Placements) != 0 {
		t.Fatalf("placements %v: the tasks behind a waiting job took the prefetch", r.Placements)
	}
	// A job that no node could ever run (its constraint matches none)
	// blocks nothing.
	nowhere := consensus.Job{ID: "nowhere", Kind: "wasm", Priority: 10, CommitIndex: 60, Constraints: map[string]string{"zone": "nowhere"}}
	if r := round(append([]consensus.Job{nowhere}, tasks...)); r == nil || len(r.Placements) != 4 {
		t.Fatalf("behind an unplaceable job: %v, want the 4 tasks prefetched", r)
	}
}

// A task no node can take says so by its kind ("wasm"), not by the
// planner's name for the tasks' capacity ("wasm/prefetch").
func TestTaskReasonNamesTheKind(t *testing.T) {
	task := consensus.Job{ID: "arr.0", Kind: "wasm", ArrayID: "arr", CommitIndex: 50}
	st := &countState{fakeState: &fakeState{queued: []consensus.Job{task}}, counts: map[string]map[string]int{}}
	var got *raftpb.SchedulerRound
	d := New(Config{
		State:         st,
		Apply:         func(_ context.Context, c *raftpb.Command) error { got = c.GetSchedulerRound(); return nil },
		Workers:       func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"browser": 1}}} },
		Now:           func() time.Time { return time.UnixMilli(1_000_000) },
		ArrayPrefetch: map[string]int{"wasm": 8},
	})
	d.Round(context.Background())
	d.Wait()
	if got == nil || len(got.Pending) != 1 || got.Pending[0].Reason != "no eligible node offers wasm capacity" {
		t.Fatalf("round: %v; want arr.0 pending for want of wasm capacity", got)
	}
}

// A round that fails at once (leadership being handed over, no quorum)
// is retried with a back-off: the loop planned and failed a round, and
// logged a warning, hundreds of times in 100 ms while a leader handed
// over with work queued.
func TestFailingRoundsBackOff(t *testing.T) {
	st := &fakeState{queued: []consensus.Job{{ID: "j1", Kind: "wasm", CommitIndex: 1}}}
	var mu sync.Mutex
	applies := 0
	d := New(Config{
		State: st,
		Apply: func(context.Context, *raftpb.Command) error {
			mu.Lock()
			applies++
			mu.Unlock()
			return &consensus.Error{Code: consensus.ErrNotLeader.Code, Message: "this node is handing leadership over to another voter"}
		},
		Workers:  func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 2}}} },
		IsLeader: true,
		Tick:     time.Second,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	d.Run(ctx)
	mu.Lock()
	defer mu.Unlock()
	// Back-off 2, 4, 8 … ms: about 8 rounds in 300 ms; the spin made
	// thousands.
	if applies < 2 || applies > 30 {
		t.Fatalf("%d rounds tried in 300 ms against a node that fails them at once; want a few, backing off", applies)
	}
}

// Past the cap on ended jobs, the driver prunes the oldest, as many as are
// over it, but nothing that ended within MinEndedAge; under the cap, only
// the retention prunes.
func TestEndedJobCap(t *testing.T) {
	now := time.UnixMilli(1_790_000_000_000)
	prunes := func(st *fakeState) []*raftpb.PruneJobs {
		var out []*raftpb.PruneJobs
		d := New(Config{State: st, MaxEndedJobs: 100, MinEndedAge: time.Minute,
			Apply: func(_ context.Context, c *raftpb.Command) error {
				if p := c.GetPruneJobs(); p != nil {
					out = append(out, p)
				}
				return nil
			},
			Now: func() time.Time { return now }})
		d.prune(context.Background(), now)
		return out
	}
	recent := now.Add(-30 * time.Second).UnixMilli()
	old := now.Add(-2 * time.Minute).UnixMilli()
	if p := prunes(&fakeState{oldest: old, prunable: 100}); len(p) != 0 {
		t.Errorf("at the cap: %v", p)
	}
	if p := prunes(&fakeState{oldest: recent, prunable: 1000}); len(p) != 0 {
		t.Errorf("over the cap, but everything ended within a minute: %v", p)
	}
	p := prunes(&fakeState{oldest: old, prunable: 130})
	if len(p) != 1 || p[0].Max != 30 || p[0].By != "ended-job cap" || p[0].BeforeMs != now.Add(-time.Minute).UnixMilli()+1 {
		t.Errorf("30 over the cap: %v", p)
	}
	// Past the retention, the retention prunes as before.
	if p := prunes(&fakeState{oldest: now.Add(-48 * time.Hour).UnixMilli(), prunable: 5}); len(p) != 1 || p[0].By != "retention" {
		t.Errorf("past the retention: %v", p)
	}
}
