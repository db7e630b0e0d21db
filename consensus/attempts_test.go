package consensus

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// TestEarlierAttemptsTellTheJobsStory: every attempt that ends without
// ending the job (re-queued by a round, by its worker, retried after a
// failure) is kept on the job with where it ran, when and why; the last
// MaxEarlierAttempts are kept, copies handed out before stay as they were,
// a submission cannot bring its own, and a snapshot keeps them.
func TestEarlierAttemptsTellTheJobsStory(t *testing.T) {
	f := NewFSM()
	round := func(at int64, rq ...*raftpb.RequeueJob) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: &raftpb.SchedulerRound{AtMs: at, Requeues: rq}}}
	}
	requeue := func(attempt uint32, node, reason string, at int64) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{Id: "j", Attempt: attempt, NodeId: node, Reason: reason, AtMs: at}}}
	}
	forged := []*raftpb.EarlierAttempt{{Attempt: 9, NodeId: "nowhere", Code: "requeued"}}
	applyAll(t, f, submitWith("j", func(r *raftpb.JobRecord) { r.MaxRetries = 3; r.EarlierAttempts = forged }), assign("j", 1, "n1"))
	before, _ := f.State().Job("j")
	if before.Earlier != nil {
		t.Fatalf("a submission brought its own earlier attempts: %+v", before.Earlier)
	}
	res := applyAll(t, f,
		round(1500, &raftpb.RequeueJob{Id: "j", Attempt: 1, Reason: "worker n1 is dead"}),
		assign("j", 2, "n2"), failAt("j", 2, "n2", true, 2500),
		assign("j", 3, "n3"), requeue(3, "n3", "node n3 stopped", 3500),
		assign("j", 4, "n1"), requeue(4, "n1", "", 0), // no reason; no time (the cluster clock's)
	)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("command %d: %v", i, r.Err)
		}
	}
	j, _ := f.State().Job("j")
	want := []EarlierAttempt{
		{Attempt: 1, NodeID: "n1", PlacedAtMS: 0, EndedAtMS: 1500, Code: "requeued", Reason: "worker n1 is dead"},
		// The placements carry no time: the cluster clock's (the last applied) is theirs.
		{Attempt: 2, NodeID: "n2", PlacedAtMS: 1500, EndedAtMS: 2500, Code: "exit_code", Reason: "boom"},
		{Attempt: 3, NodeID: "n3", PlacedAtMS: 2500, EndedAtMS: 3500, Code: "requeued", Reason: "node n3 stopped"},
		// A requeue's own time moves no clock (an older node would not
		// move it): attempt 4 is placed at the clock's 2500, and ends,
		// with no time of its own, at the clock's time.
		{Attempt: 4, NodeID: "n1", PlacedAtMS: 2500, EndedAtMS: 2500, Code: "requeued", Reason: "returned to the queue"},
	}
	if !reflect.DeepEqual(j.Earlier, want) {
		t.Fatalf("earlier attempts:\n got %+v\nwant %+v", j.Earlier, want)
	}
	// A requeue stamped far ahead (a worker's clock) moves no clock.
	clock := f.State().ClockMS()
	applyAll(t, f, assign("j", 5, "n2"), requeue(5, "n2", "ahead", clock+3_600_000))
	if got := f.State().ClockMS(); got != clock {
		t.Fatalf("a requeue's own time moved the cluster clock from %d to %d", clock, got)
	}
	// A stale requeue (attempt 1 again) records nothing.
	if r := applyAll(t, f, requeue(1, "n1", "late", 9)); r[0].Err == nil {
		t.Fatal("a stale requeue was applied")
	}
	if again, _ := f.State().Job("j"); len(again.Earlier) != 5 {
		t.Fatalf("a stale requeue changed the story: %+v", again.Earlier)
	}
	if before.Earlier != nil {
		t.Fatal("a copy handed out before changed")
	}

	// Bounded: the latest MaxEarlierAttempts are kept, oldest first.
	held := j // a copy handed out with 4 entries
	for a := uint32(6); a < 6+2*MaxEarlierAttempts; a++ {
		applyAll(t, f, assign("j", a, "n2"), requeue(a, "n2", fmt.Sprint("round ", a), int64(a)))
	}
	j, _ = f.State().Job("j")
	last := uint32(5 + 2*MaxEarlierAttempts)
	if len(j.Earlier) != MaxEarlierAttempts || j.Earlier[0].Attempt != last-MaxEarlierAttempts+1 || j.Earlier[MaxEarlierAttempts-1].Attempt != last {
		t.Fatalf("kept %d attempts, %d … %d; want the last %d ending at %d", len(j.Earlier), j.Earlier[0].Attempt, j.Earlier[len(j.Earlier)-1].Attempt, MaxEarlierAttempts, last)
	}
	if !reflect.DeepEqual(held.Earlier, want) {
		t.Fatalf("a copy handed out before changed: %+v", held.Earlier)
	}

	// The job's final attempt is the job itself, not an earlier one.
	applyAll(t, f, assign("j", last+1, "n3"), finish("j", last+1, "n3", "done"))
	j, _ = f.State().Job("j")
	if j.Phase != PhaseCompleted || len(j.Earlier) != MaxEarlierAttempts || j.Earlier[MaxEarlierAttempts-1].Attempt != last {
		t.Fatalf("after completion: phase %s, %d earlier, last %d", j.Phase, len(j.Earlier), j.Earlier[len(j.Earlier)-1].Attempt)
	}

	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if r, _ := g.State().Job("j"); !reflect.DeepEqual(r.Earlier, j.Earlier) {
		t.Fatalf("snapshot lost the earlier attempts: %+v", r.Earlier)
	}
}

// QueueAhead counts the jobs placed before one: same kind, higher
// priority first, then acceptance; bounded by its limit.
func TestQueueAhead(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, submit("a"), submit("b"), submitWith("hi", func(r *raftpb.JobRecord) { r.Priority = 5 }),
		submitWith("br", func(r *raftpb.JobRecord) { r.Kind = "browser" }), submit("c"), assign("a", 1, "n1"))
	st := f.State()
	for id, want := range map[string]int{"hi": 0, "b": 1, "c": 2, "br": 0} {
		if n, ok := st.QueueAhead(id, 100); !ok || n != want {
			t.Errorf("%s: %d ahead (queued %v), want %d", id, n, ok, want)
		}
	}
	if n, ok := st.QueueAhead("c", 1); !ok || n != 1 {
		t.Errorf("limited to 1: %d", n)
	}
	if _, ok := st.QueueAhead("a", 100); ok {
		t.Error("a running job has a place in the queue")
	}
}

// Prunable counts what a prune can remove: ended jobs outside arrays and
// the tasks of finished arrays, not the ended tasks of an array still
// running; it follows prunes and snapshots.
func TestPrunableCountsWholeUnits(t *testing.T) {
	f := NewFSM()
	arr := &raftpb.Command{Cmd: &raftpb.Command_SubmitArray{SubmitArray: &raftpb.SubmitArray{
		Template: &raftpb.JobRecord{Id: "a", Kind: "wasm", ModuleSha256: "ab"},
		Tasks:    []*raftpb.ArrayTask{{Input: []byte("0")}, {Input: []byte("1")}, {Input: []byte("2")}}}}}
	applyAll(t, f, submit("j1"), submit("j2"), arr,
		assign("j1", 1, "n1"), finishCmdAt("j1", 1, "n1", 10),
		assign("a.0", 1, "n1"), finishCmdAt("a.0", 1, "n1", 11), assign("a.1", 1, "n1"), finishCmdAt("a.1", 1, "n1", 12))
	if got := f.State().Prunable(); got != 1 {
		t.Fatalf("prunable %d, want 1: j1 (the array runs on)", got)
	}
	applyAll(t, f, assign("a.2", 1, "n1"), finishCmdAt("a.2", 1, "n1", 13))
	if got := f.State().Prunable(); got != 4 {
		t.Fatalf("prunable %d, want 4: j1 and the finished array's 3 tasks", got)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if got := g.State().Prunable(); got != 4 {
		t.Fatalf("restored: prunable %d, want 4", got)
	}
	prune := &raftpb.Command{Cmd: &raftpb.Command_PruneJobs{PruneJobs: &raftpb.PruneJobs{BeforeMs: 100, Max: 10}}}
	applyAll(t, f, prune)
	if got := f.State().Prunable(); got != 0 {
		t.Fatalf("after pruning everything: prunable %d", got)
	}
}
