package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// fsmLog applies commands to a real FSM as raft would.
type fsmLog struct {
	t     *testing.T
	fsm   *consensus.FSM
	index uint64
}

func (l *fsmLog) apply(cmd *raftpb.Command) consensus.ApplyResult {
	l.t.Helper()
	data, err := proto.Marshal(cmd)
	if err != nil {
		l.t.Fatal(err)
	}
	l.index++
	res, _ := l.fsm.Apply(&raft.Log{Type: raft.LogCommand, Index: l.index, Data: data}).(consensus.ApplyResult)
	return res
}

// fsmDriver is a leading Driver over a real FSM whose members are the
// workers, its rounds applied at once; cfg gives the rest (Now defaults
// to a fixed time).
func fsmDriver(t *testing.T, cfg Config, workers ...Worker) (*Driver, *fsmLog) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	for _, w := range workers {
		l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: w.ID}}}})
	}
	cfg.State, cfg.IsLeader = l.fsm.State(), true
	cfg.Apply = func(_ context.Context, c *raftpb.Command) error { l.apply(c); return nil }
	cfg.Workers = func() []Worker { return workers }
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return time.UnixMilli(1_000_000) }
	}
	return New(cfg), l
}

// piggyCommit proposes cmd with the round d attaches to it, as the
// leader does, and applies both to l in one entry.
func piggyCommit(d *Driver, l *fsmLog, cmd *raftpb.Command) {
	r, done := d.Piggyback(cmd)
	l.apply(&raftpb.Command{Cmd: cmd.Cmd, Round: r})
	if done != nil {
		done()
	}
}

// arrayCmd submits array id of n trivial wasm tasks.
func arrayCmd(id string, n int) *raftpb.Command {
	arr := &raftpb.SubmitArray{Template: &raftpb.JobRecord{Id: id, Kind: "wasm", ModuleSha256: "m"}}
	for range n {
		arr.Tasks = append(arr.Tasks, &raftpb.ArrayTask{Input: []byte("x")})
	}
	return &raftpb.Command{Cmd: &raftpb.Command_SubmitArray{SubmitArray: arr}}
}

func submitCmd(id string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: &raftpb.JobRecord{Id: id, Kind: "wasm", ModuleSha256: "m"}}}}
}

func resultCmd(id string, attempt uint32, node string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: []*raftpb.FinishJob{
		{Id: id, Attempt: attempt, NodeId: node, Ok: true}}}}}
}

// Placements ride the leader's own commands, against the real FSM: a
// submit is placed in its own entry while a slot is free; a batch of
// results hands the slot it frees to the head of the queue (not to a
// newer job); a placement still committing is never planned twice, by a
// piggybacked round or a standalone one; a stale result frees nothing.
func TestPiggybackPlacesInTheSameEntry(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n1"}}}})
	var mu sync.Mutex
	var rounds []*raftpb.SchedulerRound
	d := New(Config{
		State:    l.fsm.State(),
		IsLeader: true,
		Apply: func(_ context.Context, c *raftpb.Command) error {
			mu.Lock()
			defer mu.Unlock()
			rounds = append(rounds, c.GetSchedulerRound())
			return nil
		},
		Workers: func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}}} },
		Now:     func() time.Time { return time.UnixMilli(1_000_000) },
	})
	st := l.fsm.State()
	commit := func(cmd *raftpb.Command) { t.Helper(); piggyCommit(d, l, cmd) }
	phase := func(id string) (consensus.Phase, string) {
		j, _ := st.Job(id)
		return j.Phase, j.NodeID
	}

	commit(submitCmd("a"))
	if p, n := phase("a"); p != consensus.PhaseRunning || n != "n1" {
		t.Fatalf("a is %s on %q after its submit; want running on n1 in the same entry", p, n)
	}
	commit(submitCmd("b"))
	commit(submitCmd("c"))
	if p, _ := phase("b"); p != consensus.PhaseQueued {
		t.Fatalf("b is %s; n1's one slot is taken", p)
	}
	if r, _ := d.Piggyback(resultCmd("a", 7, "n1")); r != nil {
		t.Fatalf("a stale result (attempt 7) freed a slot: %v", r.Placements)
	}

	// a's result: its slot goes to b, the head of the queue, not to c.
	r, done := d.Piggyback(resultCmd("a", 1, "n1"))
	if r == nil || len(r.Placements) != 1 || r.Placements[0].Id != "b" {
		t.Fatalf("round on a's result: %v; want b placed", r)
	}
	// While that entry commits, nothing plans b again or gives its slot away.
	if r2, _ := d.Piggyback(submitCmd("d")); r2 != nil {
		t.Fatalf("a submit took the slot reserved for b: %v", r2.Placements)
	}
	d.Round(context.Background())
	d.Wait()
	for _, rd := range rounds {
		for _, p := range rd.GetPlacements() {
			t.Fatalf("a standalone round placed %s while b's placement was committing", p.Id)
		}
	}
	l.apply(&raftpb.Command{Cmd: resultCmd("a", 1, "n1").Cmd, Round: r})
	done()
	if p, _ := phase("a"); p != consensus.PhaseCompleted {
		t.Fatalf("a is %s", p)
	}
	if p, n := phase("b"); p != consensus.PhaseRunning || n != "n1" {
		t.Fatalf("b is %s on %q; want running on n1", p, n)
	}
	if p, _ := phase("c"); p != consensus.PhaseQueued {
		t.Fatalf("c is %s; want queued behind b", p)
	}

	// A follower never plans: a driver that does not lead attaches nothing.
	follower := New(Config{State: st, Workers: func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 4}}} }})
	if r, _ := follower.Piggyback(submitCmd("e")); r != nil {
		t.Fatalf("a driver that does not lead attached %v", r.Placements)
	}
}

// A group commit (consensus.CommandBatch) gets one round for all of its
// commands: the submits in it are placed in the same entry, up to the free
// slots, in batch order, and a result in it frees its slot for them.
func TestPiggybackPlacesABatchInOneRound(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n1"}}}})
	d := New(Config{
		State:    l.fsm.State(),
		IsLeader: true,
		Apply:    func(context.Context, *raftpb.Command) error { return nil },
		Workers:  func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 2}}} },
		Now:      func() time.Time { return time.UnixMilli(1_000_000) },
	})
	st := l.fsm.State()
	batch := func(cmds ...*raftpb.Command) {
		t.Helper()
		cmd := &raftpb.Command{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: cmds}}}
		r, done := d.Piggyback(cmd)
		res := l.apply(&raftpb.Command{Cmd: cmd.Cmd, Round: r})
		if done != nil {
			done()
		}
		if len(res.Each) != len(cmds) {
			t.Fatalf("batch of %d answered %d results", len(cmds), len(res.Each))
		}
		for i, e := range res.Each {
			if e.Err != nil {
				t.Fatalf("command %d of the batch: %v", i, e.Err)
			}
		}
	}
	phase := func(id string) consensus.Phase {
		j, _ := st.Job(id)
		return j.Phase
	}
	batch(submitCmd("a"), submitCmd("b"), submitCmd("c"))
	if phase("a") != consensus.PhaseRunning || phase("b") != consensus.PhaseRunning || phase("c") != consensus.PhaseQueued {
		t.Fatalf("after one batch of three submits on two slots: a %s, b %s, c %s; want the first two placed in the entry", phase("a"), phase("b"), phase("c"))
	}
	// a's result and a new submit in one batch: a's slot goes to c (the
	// head of the queue), not to d.
	batch(resultCmd("a", 1, "n1"), submitCmd("d"))
	if phase("a") != consensus.PhaseCompleted || phase("c") != consensus.PhaseRunning || phase("d") != consensus.PhaseQueued {
		t.Fatalf("after a's result and d's submit: a %s, c %s, d %s; want a completed, c placed, d queued", phase("a"), phase("c"), phase("d"))
	}
}

// An array's tasks are prefetched deeper once results say they are
// short: against the real FSM, the first array of a kind gets one task
// waiting per slot; a result carrying a 1 ms run lets the round in that
// result's entry fill the configured depth.
func TestArrayPrefetchDeepensOnShortResults(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n1"}}}})
	d := New(Config{
		State:         l.fsm.State(),
		IsLeader:      true,
		Apply:         func(_ context.Context, c *raftpb.Command) error { l.apply(c); return nil },
		Workers:       func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 2}}} },
		Now:           func() time.Time { return time.UnixMilli(1_000_000) },
		ArrayPrefetch: map[string]int{"wasm": 8},
	})
	st := l.fsm.State()
	commit := func(cmd *raftpb.Command) { t.Helper(); piggyCommit(d, l, cmd) }
	commit(arrayCmd("arr", 100))
	if got := len(st.RunningOn("n1")); got != 4 {
		t.Fatalf("before any result: %d tasks placed on 2 slots, want 4 (one waiting per slot)", got)
	}
	d.Round(context.Background()) // a standalone round holds it there too
	d.Wait()
	if got := len(st.RunningOn("n1")); got != 4 {
		t.Fatalf("before any result, after a round: %d tasks placed on 2 slots, want 4", got)
	}
	done := &raftpb.FinishJob{Id: consensus.TaskID("arr", 0), Attempt: 1, NodeId: "n1", Ok: true, RanUs: 1000, AtMs: 1_000_001}
	commit(&raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: []*raftpb.FinishJob{done}}}})
	if got := len(st.RunningOn("n1")); got != 18 {
		t.Fatalf("after a 1 ms task: %d tasks on 2 slots, want 18 (8 waiting per slot)", got)
	}
}

// Array tasks held back behind a waiting job are planned against the
// smaller of its depth and theirs: the FSM checks a task against the
// array-task capacity, so planning more (the single-job capacity, once it
// was the larger) proposed placements the FSM dropped, and the driver
// proposed them again at once, round after round.
func TestBlockedTasksPlanWhatTheFSMAccepts(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	for _, n := range []string{"n1", "n2"} {
		l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: n}}}})
	}
	var proposed []*raftpb.SchedulerRound
	d := New(Config{
		State:    l.fsm.State(),
		IsLeader: true,
		Apply: func(_ context.Context, c *raftpb.Command) error {
			proposed = append(proposed, c.GetSchedulerRound())
			return nil
		},
		Workers: func() []Worker {
			return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}, Labels: map[string]string{"zone": "a"}},
				{ID: "n2", Alive: true, Slots: map[string]int{"wasm": 1}}}
		},
		Now:           func() time.Time { return time.UnixMilli(1_000_000) },
		Prefetch:      map[string]int{"wasm": 4},
		ArrayPrefetch: map[string]int{"wasm": 8},
	})
	d.mu.Lock()
	d.observeRun("wasm", 10) // short single jobs: 4 waiting per slot
	d.mu.Unlock()
	st := l.fsm.State()
	commit := func(cmd *raftpb.Command) { t.Helper(); piggyCommit(d, l, cmd) }
	zoneA := map[string]string{"zone": "a"}
	for i := range 5 { // n1 full: 5 held
		commit(&raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: &raftpb.JobRecord{Id: fmt.Sprint("a", i), Kind: "wasm", ModuleSha256: "m", Constraints: zoneA}}}})
	}
	commit(arrayCmd("arr", 50)) // no task ended: 1 waiting per slot
	if n1, n2 := len(st.RunningOn("n1")), len(st.RunningOn("n2")); n1 != 5 || n2 != 2 {
		t.Fatalf("set-up: %d running on n1, %d on n2; want 5 and 2", n1, n2)
	}
	// A priority-10 job only n1 can run waits; the tasks behind it may not
	// take n2's single-job capacity (5) beyond their own (2).
	commit(&raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: &raftpb.JobRecord{Id: "urgent", Kind: "wasm", ModuleSha256: "m", Priority: 10, Constraints: zoneA}}}})
	d.Round(context.Background())
	d.Wait()
	for _, r := range proposed {
		if n := len(r.GetPlacements()); n > 0 {
			before := len(st.RunningOn("n2"))
			l.apply(&raftpb.Command{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: r}})
			t.Fatalf("a round proposed %d placements behind the waiting job; the FSM took %d of them", n, len(st.RunningOn("n2"))-before)
		}
	}
}

// Random queues of single jobs and arrays (priorities, constraints, and
// arrays at different depths by their tasks' runs) on random workers,
// against the real FSM: the FSM takes every placement a round or a
// piggybacked round proposes (single jobs and tasks of different depths
// share each node's count: counted apart, one round could overfill a
// node and the FSM dropped the excess), and no node ever holds more than
// its slots times one plus the deepest prefetch.
func TestRoundsProposeWhatTheFSMTakes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range 60 {
		l := &fsmLog{t: t, fsm: consensus.NewFSM()}
		var workers []Worker
		for i := range 1 + r.IntN(3) {
			id := fmt.Sprint("n", i)
			l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: id}}}})
			workers = append(workers, Worker{ID: id, Alive: true, Slots: map[string]int{"wasm": 1 + r.IntN(3)}, Labels: map[string]string{"zone": fmt.Sprint(r.IntN(2))}})
		}
		var proposed []*raftpb.SchedulerRound
		d := New(Config{
			State:    l.fsm.State(),
			IsLeader: true,
			Apply: func(_ context.Context, c *raftpb.Command) error {
				proposed = append(proposed, c.GetSchedulerRound())
				return nil
			},
			Workers:       func() []Worker { return workers },
			Now:           func() time.Time { return time.UnixMilli(1_000_000) },
			Prefetch:      map[string]int{"wasm": 4},
			ArrayPrefetch: map[string]int{"wasm": 8},
		})
		if r.IntN(2) == 0 {
			d.mu.Lock()
			d.observeRun("wasm", 10)
			d.mu.Unlock()
		}
		st := l.fsm.State()
		// took applies a proposed round and fails unless the FSM placed
		// every job it names.
		took := func(rd *raftpb.SchedulerRound, cmd *raftpb.Command) {
			t.Helper()
			before := map[string]bool{}
			for _, p := range rd.GetPlacements() {
				j, _ := st.Job(p.Id)
				before[p.Id] = j.Phase == consensus.PhaseRunning
			}
			if cmd == nil {
				cmd = &raftpb.Command{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: rd}}
			} else {
				cmd = &raftpb.Command{Cmd: cmd.Cmd, Round: rd}
			}
			l.apply(cmd)
			for _, p := range rd.GetPlacements() {
				if j, _ := st.Job(p.Id); j.Phase != consensus.PhaseRunning || j.NodeID != p.NodeId || before[p.Id] {
					t.Fatalf("trial %d: the FSM dropped the placement of %s on %s (job %s on %q)", trial, p.Id, p.NodeId, j.Phase, j.NodeID)
				}
			}
			for _, w := range workers {
				if n := len(st.RunningOn(w.ID)); n > w.Slots["wasm"]*9 {
					t.Fatalf("trial %d: %s holds %d with %d slots", trial, w.ID, n, w.Slots["wasm"])
				}
			}
		}
		commit := func(cmd *raftpb.Command) {
			rd, done := d.Piggyback(cmd)
			if rd != nil {
				took(rd, cmd)
			} else {
				l.apply(cmd)
			}
			if done != nil {
				done()
			}
		}
		for step := range 40 {
			switch x := r.IntN(10); {
			case x < 4:
				job := &raftpb.JobRecord{Id: fmt.Sprint("j", step), Kind: "wasm", ModuleSha256: "m", Priority: int32(r.IntN(3))}
				if r.IntN(3) == 0 {
					job.Constraints = map[string]string{"zone": fmt.Sprint(r.IntN(2))}
				}
				commit(&raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: job}}})
			case x < 6:
				id := fmt.Sprint("arr", step)
				arr := arrayCmd(id, 1+r.IntN(40))
				arr.GetSubmitArray().Template.Priority = int32(r.IntN(3))
				if r.IntN(4) == 0 {
					arr.GetSubmitArray().Template.Constraints = map[string]string{"zone": fmt.Sprint(r.IntN(2))}
				}
				commit(arr)
				// Some arrays' tasks are known short (deep), some long (one).
				d.mu.Lock()
				d.observeTaskRun(id, []int64{500, 20_000, 300_000}[r.IntN(3)])
				d.mu.Unlock()
			case x < 8: // finish a few running jobs
				var res []*raftpb.FinishJob
				for _, w := range workers {
					for _, j := range st.RunningOn(w.ID) {
						if r.IntN(3) == 0 {
							res = append(res, &raftpb.FinishJob{Id: j.ID, Attempt: j.Attempt, NodeId: w.ID, Ok: true, RanUs: 1000, AtMs: 1_000_001})
						}
					}
				}
				if len(res) > 0 {
					commit(&raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: res}}})
				}
			default:
				proposed = nil
				d.Round(context.Background())
				d.Wait()
				for _, rd := range proposed {
					if rd != nil {
						took(rd, nil)
					}
				}
			}
		}
	}
}

// A round reads the queue under the state's read lock (State.Queued); a
// read of the state from inside it waits behind a writer that waits for
// that lock, and the leader's FSM stops for good. Rounds run here beside
// a stream of applies to the real FSM, with array tasks queued (a first
// try at per-array prefetch read each array's counts in the walk, and
// the bench's leader hung).
func TestRoundsBesideAppliesDoNotDeadlock(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n1"}}}})
	l.apply(arrayCmd("arr", 2000))
	d := New(Config{
		State:         l.fsm.State(),
		IsLeader:      true,
		Apply:         func(context.Context, *raftpb.Command) error { return nil },
		Workers:       func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}}} },
		Now:           func() time.Time { return time.UnixMilli(1_000_000) },
		ArrayPrefetch: map[string]int{"wasm": 8},
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for stop := time.Now().Add(500 * time.Millisecond); time.Now().Before(stop); {
			d.Round(context.Background())
			d.Wait()
		}
	}()
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			l.apply(submitCmd(fmt.Sprint("j", i)))
		}
	}()
	select {
	case <-applied:
	case <-time.After(20 * time.Second):
		t.Fatal("rounds and applies stopped each other (a read of the state inside State.Queued)")
	}
}

// A new array starts at one waiting task per slot, whatever the arrays
// before it ran: an array of long tasks submitted after one of short
// tasks is not parked deep behind them (an average per kind gave it the
// short tasks' depth until its own first result), and takes a place as
// the node drains below that (real FSM).
func TestNewArrayIsNotParkedAtAnotherArraysDepth(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n1"}}}})
	d := New(Config{
		State:         l.fsm.State(),
		IsLeader:      true,
		Apply:         func(_ context.Context, c *raftpb.Command) error { l.apply(c); return nil },
		Workers:       func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 2}}} },
		Now:           func() time.Time { return time.UnixMilli(1_000_000) },
		ArrayPrefetch: map[string]int{"wasm": 8},
	})
	st := l.fsm.State()
	commit := func(cmd *raftpb.Command) { t.Helper(); piggyCommit(d, l, cmd) }
	commit(arrayCmd("short", 10))
	d.mu.Lock()
	d.observeTaskRun("short", 500) // 0.5 ms tasks: 8 waiting per slot
	d.mu.Unlock()
	d.Round(context.Background())
	d.Wait()
	if got := len(st.RunningOn("n1")); got != 10 {
		t.Fatalf("short tasks: %d held on 2 slots, want all 10 (capacity 18)", got)
	}
	commit(arrayCmd("long", 10))
	d.Round(context.Background())
	d.Wait()
	if got := len(st.RunningOn("n1")); got != 10 {
		t.Fatalf("the new array's tasks took %d of the 8 places left at the short tasks' depth; want none (one per slot until its first result)", got-10)
	}
	var res []*raftpb.FinishJob
	for i := range 7 {
		res = append(res, &raftpb.FinishJob{Id: consensus.TaskID("short", uint32(i)), Attempt: 1, NodeId: "n1", Ok: true, RanUs: 500, AtMs: 1_000_001})
	}
	commit(&raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: res}}})
	long := 0
	for _, j := range st.RunningOn("n1") {
		if j.ArrayID == "long" {
			long++
		}
	}
	if held := len(st.RunningOn("n1")); long != 1 || held != 4 {
		t.Fatalf("after 7 short tasks ended: %d held, %d of the new array; want 4 (2 slots, one waiting each), 1 of them the new array's", held, long)
	}
}

// queue applies cmds to l without a round: the jobs wait in the queue.
func queue(l *fsmLog, cmds ...*raftpb.Command) {
	for _, c := range cmds {
		l.apply(c)
	}
}

// A job left waiting is not overtaken through prefetch by a deeper job
// behind it, even when the walk's estimate thought it had room (places
// taken in the same round by jobs of another depth): the planner caps
// the depth behind it. Priority-10 single jobs fill a node to the depth
// of a new priority-5 array (one per slot); a priority-0 array of short
// tasks (depth 8) must not park behind them ahead of it.
func TestWaitingArrayIsNotOvertakenByDeeperTasks(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n1"}}}})
	d := New(Config{
		State:         l.fsm.State(),
		IsLeader:      true,
		Apply:         func(_ context.Context, c *raftpb.Command) error { l.apply(c); return nil },
		Workers:       func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 2}}} },
		Now:           func() time.Time { return time.UnixMilli(1_000_000) },
		Prefetch:      map[string]int{"wasm": 4},
		ArrayPrefetch: map[string]int{"wasm": 8},
	})
	d.mu.Lock()
	d.observeRun("wasm", 10) // short single jobs: 4 waiting per slot
	d.observeTaskRun("x", 500)
	d.mu.Unlock()
	var cmds []*raftpb.Command
	for i := range 4 {
		c := submitCmd(fmt.Sprint("s", i))
		c.GetSubmitJob().Job.Priority = 10
		cmds = append(cmds, c)
	}
	y, x := arrayCmd("y", 2), arrayCmd("x", 20)
	y.GetSubmitArray().Template.Priority = 5
	queue(l, append(cmds, y, x)...)
	d.Round(context.Background())
	d.Wait()
	st := l.fsm.State()
	per := map[string]int{}
	for _, j := range st.RunningOn("n1") {
		per[j.ArrayID]++
	}
	if per[""] != 4 || per["x"] != 0 {
		t.Fatalf("held on n1 by array (\"\": single jobs): %v; want the 4 single jobs and none of x's tasks ahead of y's", per)
	}
}

// A job left waiting caps the depth only on the nodes it could run on: an
// array of long tasks that only zone a can run does not hold the short
// tasks of another array to its depth on zone b.
func TestWaitingJobCapsOnlyItsNodes(t *testing.T) {
	d, l := fsmDriver(t, Config{ArrayPrefetch: map[string]int{"wasm": 8}},
		Worker{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}, Labels: map[string]string{"zone": "a"}},
		Worker{ID: "n2", Alive: true, Slots: map[string]int{"wasm": 2}, Labels: map[string]string{"zone": "b"}})
	d.mu.Lock()
	d.observeTaskRun("y", 300_000) // long: one waiting per slot
	d.observeTaskRun("x", 500)     // short: 8 waiting per slot
	d.mu.Unlock()
	y, x := arrayCmd("y", 10), arrayCmd("x", 40)
	y.GetSubmitArray().Template.Constraints = map[string]string{"zone": "a"}
	queue(l, y, x)
	d.Round(context.Background())
	d.Wait()
	st := l.fsm.State()
	if n1, n2 := len(st.RunningOn("n1")), len(st.RunningOn("n2")); n1 != 2 || n2 != 18 {
		t.Fatalf("n1 holds %d, n2 %d; want 2 of y's on n1 (1 slot, 1 waiting) and 18 of x's on n2 (2 slots, 8 waiting each)", n1, n2)
	}
}

// A job for one node is not hidden by jobs for another placed ahead of it
// in the same round: the walk's estimate of a shape's room counts only
// that shape's placements (counting every placement of the kind, a stream
// of zone-a jobs ahead of it kept a zone-b job from zone b's free slot).
func TestJobsForOtherNodesDoNotHideAFreeSlot(t *testing.T) {
	d, l := fsmDriver(t, Config{},
		Worker{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}, Labels: map[string]string{"zone": "a"}},
		Worker{ID: "n2", Alive: true, Slots: map[string]int{"wasm": 1}, Labels: map[string]string{"zone": "b"}})
	submit := func(id, zone string, prio int32) {
		l.apply(&raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: &raftpb.JobRecord{
			Id: id, Kind: "wasm", ModuleSha256: "m", Priority: prio, Constraints: map[string]string{"zone": zone}}}}})
	}
	submit("x", "c", 0) // no node is in zone c: the first round refreshes its pending reason
	d.Round(context.Background())
	d.Wait()
	submit("a1", "a", 5)
	submit("b1", "b", 0)
	d.Round(context.Background()) // within the second: no job is offered for its reason alone
	d.Wait()
	st := l.fsm.State()
	if a, b := len(st.RunningOn("n1")), len(st.RunningOn("n2")); a != 1 || b != 1 {
		t.Fatalf("one round placed %d on n1 and %d on n2; want a1 on n1 and b1 on n2", a, b)
	}
}

// Jobs behind a waiting job, on its nodes, have no room there (the
// planner caps them): the walk must not count them as placeable, or,
// offered in vain, they use up the walk before it reaches a job with a
// free slot on another node. A zone-a job waits on a busy zone-a node;
// three zone-a arrays of short tasks follow it, then a zone-b job that
// the idle zone-b node can run at once.
func TestJobsBehindAWaitingJobDoNotHideAFreeSlot(t *testing.T) {
	d, l := fsmDriver(t, Config{ArrayPrefetch: map[string]int{"wasm": 8}},
		Worker{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}, Labels: map[string]string{"zone": "a"}},
		Worker{ID: "n2", Alive: true, Slots: map[string]int{"wasm": 1}, Labels: map[string]string{"zone": "b"}})
	st := l.fsm.State()
	zone := func(z string) map[string]string { return map[string]string{"zone": z} }
	submit := func(id, z string, prio int32) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: &raftpb.JobRecord{
			Id: id, Kind: "wasm", ModuleSha256: "m", Priority: prio, Constraints: zone(z)}}}}
	}
	queue(l, submit("busy", "a", 20))
	d.Round(context.Background()) // busy runs on n1: its one slot is taken
	d.Wait()
	if j, _ := st.Job("busy"); j.NodeID != "n1" {
		t.Fatalf("set-up: busy is %s on %q", j.Phase, j.NodeID)
	}
	cmds := []*raftpb.Command{submit("w", "a", 10)}
	for i, us := range []int64{12_500, 14_300, 16_700} { // depths 8, 7, 6
		id := fmt.Sprint("arr", i)
		a := arrayCmd(id, 10)
		a.GetSubmitArray().Template.Constraints = zone("a")
		a.GetSubmitArray().Template.Priority = 5
		cmds = append(cmds, a)
		d.mu.Lock()
		d.observeTaskRun(id, us)
		d.mu.Unlock()
	}
	cmds = append(cmds, submit("y", "b", 0))
	queue(l, cmds...)
	d.Round(context.Background())
	d.Wait()
	if j, _ := st.Job("y"); j.Phase != consensus.PhaseRunning || j.NodeID != "n2" {
		t.Fatalf("y is %s on %q; want running on the idle zone-b node n2", j.Phase, j.NodeID)
	}
	if n := len(st.RunningOn("n1")); n != 1 {
		t.Fatalf("n1 holds %d; want only busy (the arrays wait behind w)", n)
	}
}

// After a waiting job caps its nodes, the places offered before it may
// have gone into the room the cap took away: the walk's estimate must not
// subtract them from the room left elsewhere. Counted twice, a second
// array of the same depth found no room, waited as if the cluster were
// full, and took one place on the idle zone-b node instead of nine.
func TestCapsDoNotCountPlacesOfferedBeforeThemTwice(t *testing.T) {
	d, l := fsmDriver(t, Config{ArrayPrefetch: map[string]int{"wasm": 8}},
		Worker{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 8}, Labels: map[string]string{"zone": "a"}},
		Worker{ID: "n2", Alive: true, Slots: map[string]int{"wasm": 1}, Labels: map[string]string{"zone": "b"}})
	st := l.fsm.State()
	d.Round(context.Background()) // the pending-reason pass of the first round
	d.Wait()
	for _, id := range []string{"pre", "s", "s2"} {
		d.mu.Lock()
		d.observeTaskRun(id, 12_500) // depth 8
		d.mu.Unlock()
	}
	pre := arrayCmd("pre", 16)
	pre.GetSubmitArray().Template.Constraints = map[string]string{"zone": "a"}
	piggyCommit(d, l, pre)
	if n := len(st.RunningOn("n1")); n != 16 {
		t.Fatalf("set-up: n1 holds %d, want 16", n)
	}
	s, s2 := arrayCmd("s", 30), arrayCmd("s2", 20)
	s.GetSubmitArray().Template.Priority = 10
	s2.GetSubmitArray().Template.Priority = 5
	w := submitCmd("w")
	w.GetSubmitJob().Job.Priority = 5
	w.GetSubmitJob().Job.Constraints = map[string]string{"zone": "a"}
	queue(l, s, w, s2)
	d.Round(context.Background())
	d.Wait()
	per := map[string]int{}
	for _, j := range st.RunningOn("n2") {
		per[j.ArrayID]++
	}
	if per["s2"] != 9 {
		t.Fatalf("n2 holds %v; want 9 of s2's tasks (1 slot, 8 waiting)", per)
	}
}

// A new job of higher priority than a waiting job comes before it: the
// waiting job's cap does not apply to it, and it is placed in the entry
// that accepts it.
func TestHigherPriorityJobIsNotCappedByALowerWaitingJob(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n1"}}}})
	d := New(Config{
		State:         l.fsm.State(),
		IsLeader:      true,
		Apply:         func(_ context.Context, c *raftpb.Command) error { l.apply(c); return nil },
		Workers:       func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 1}}} },
		Now:           func() time.Time { return time.UnixMilli(1_000_000) },
		Prefetch:      map[string]int{"wasm": 4},
		ArrayPrefetch: map[string]int{"wasm": 8},
	})
	d.mu.Lock()
	d.observeRun("wasm", 10) // short single jobs: 4 waiting per slot
	d.mu.Unlock()
	st := l.fsm.State()
	piggyCommit(d, l, submitCmd("a"))
	piggyCommit(d, l, submitCmd("b"))
	if n := len(st.RunningOn("n1")); n != 2 {
		t.Fatalf("set-up: n1 holds %d, want 2", n)
	}
	queue(l, arrayCmd("w", 5)) // a new array: one waiting per slot, no room (2 held)
	urgent := submitCmd("urgent")
	urgent.GetSubmitJob().Job.Priority = 10
	piggyCommit(d, l, urgent)
	if j, _ := st.Job("urgent"); j.Phase != consensus.PhaseRunning {
		t.Fatalf("urgent is %s; want placed in the entry that accepts it (room at its depth: 5 places, 2 held)", j.Phase)
	}
}
