package driver

import (
	"context"
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
	commit := func(cmd *raftpb.Command) {
		t.Helper()
		r, done := d.Piggyback(cmd)
		l.apply(&raftpb.Command{Cmd: cmd.Cmd, Round: r})
		if done != nil {
			done()
		}
	}
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

// An array's tasks are prefetched deeper once its results say they are
// short: against the real FSM, a fresh array gets one task waiting per
// slot; a result carrying a 1 ms run lets the next round fill the
// configured depth.
func TestArrayPrefetchDeepensOnShortResults(t *testing.T) {
	l := &fsmLog{t: t, fsm: consensus.NewFSM()}
	l.apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n1"}}}})
	d := New(Config{
		State:         l.fsm.State(),
		IsLeader:      true,
		Apply:         func(context.Context, *raftpb.Command) error { return nil },
		Workers:       func() []Worker { return []Worker{{ID: "n1", Alive: true, Slots: map[string]int{"wasm": 2}}} },
		Now:           func() time.Time { return time.UnixMilli(1_000_000) },
		ArrayPrefetch: map[string]int{"wasm": 8},
	})
	st := l.fsm.State()
	commit := func(cmd *raftpb.Command) {
		t.Helper()
		r, done := d.Piggyback(cmd)
		l.apply(&raftpb.Command{Cmd: cmd.Cmd, Round: r})
		if done != nil {
			done()
		}
	}
	arr := &raftpb.SubmitArray{Template: &raftpb.JobRecord{Id: "arr", Kind: "wasm", ModuleSha256: "m"}}
	for range 100 {
		arr.Tasks = append(arr.Tasks, &raftpb.ArrayTask{Input: []byte("x")})
	}
	commit(&raftpb.Command{Cmd: &raftpb.Command_SubmitArray{SubmitArray: arr}})
	if got := len(st.RunningOn("n1")); got != 4 {
		t.Fatalf("a fresh array: %d tasks placed on 2 slots, want 4 (one waiting per slot)", got)
	}
	done := &raftpb.FinishJob{Id: consensus.TaskID("arr", 0), Attempt: 1, NodeId: "n1", Ok: true, RanUs: 1000, AtMs: 1_000_001}
	commit(&raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: []*raftpb.FinishJob{done}}}})
	if got := len(st.RunningOn("n1")); got != 18 {
		t.Fatalf("after a 1 ms task: %d tasks on 2 slots, want 18 (8 waiting per slot)", got)
	}
}
