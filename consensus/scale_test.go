package consensus

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

func addNode(id string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: id}}}}
}

func round(at int64, slots map[string]uint32, placements ...*raftpb.AssignJob) *raftpb.Command {
	r := &raftpb.SchedulerRound{AtMs: at, Placements: placements, Rules: SkillRules}
	for n, s := range slots {
		r.Slots = append(r.Slots, &raftpb.NodeSlots{NodeId: n, Kind: "wasm", Slots: s})
	}
	return &raftpb.Command{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: r}}
}

func place(id string, attempt uint32, node string) *raftpb.AssignJob {
	return &raftpb.AssignJob{Id: id, Attempt: attempt, NodeId: node}
}

func finishAt(id string, attempt uint32, node string, at int64) *raftpb.FinishJob {
	return &raftpb.FinishJob{Id: id, Attempt: attempt, NodeId: node, Ok: true, AtMs: at, Stdout: []byte("out-" + id)}
}

func batch(results ...*raftpb.FinishJob) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: results}}}
}

func prune(before int64) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_PruneJobs{PruneJobs: &raftpb.PruneJobs{BeforeMs: before}}}
}

func array(id string, inputs ...string) *raftpb.Command {
	c := &raftpb.SubmitArray{Template: &raftpb.JobRecord{Id: id, Kind: "wasm", ModuleSha256: "mod"}}
	for _, in := range inputs {
		c.Tasks = append(c.Tasks, &raftpb.ArrayTask{Input: []byte(in)})
	}
	return &raftpb.Command{Cmd: &raftpb.Command_SubmitArray{SubmitArray: c}}
}

func ids(js []Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// The indexes follow every transition: queue order, running by node,
// counts by phase, listing newest first with a cursor.
func TestIndexesFollowTransitions(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), addNode("n2"), submit("a"), submit("b"), submitWith("c", func(r *raftpb.JobRecord) { r.Priority = 5 }))
	st := f.State()
	var queued []string
	st.Queued("wasm", func(j Job) bool { queued = append(queued, j.ID); return true })
	if fmt.Sprint(queued) != "[c a b]" {
		t.Fatalf("placement order %v, want priority first then acceptance", queued)
	}
	res := applyAll(t, f, round(10, map[string]uint32{"n1": 4, "n2": 4}, place("c", 1, "n1"), place("a", 1, "n2")))
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	if got := ids(st.Jobs(JobFilter{Phase: PhaseRunning, NodeID: "n1"})); fmt.Sprint(got) != "[c]" {
		t.Fatalf("running on n1: %v", got)
	}
	if c := st.CountByPhase(); c[PhaseRunning] != 2 || c[PhaseQueued] != 1 {
		t.Fatalf("counts %v", c)
	}
	r := applyAll(t, f, batch(finishAt("c", 1, "n1", 20), finishAt("a", 1, "n1", 21), finishAt("a", 1, "n2", 22)))
	if r[0].Batch[0] != nil || r[0].Batch[1] == nil || r[0].Batch[2] != nil {
		t.Fatalf("batch verdicts %v: want the result from the wrong node refused alone", r[0].Batch)
	}
	if st.StaleResults() != 1 {
		t.Fatalf("stale results %d", st.StaleResults())
	}
	if got := ids(st.Jobs(JobFilter{Newest: true})); fmt.Sprint(got) != "[c b a]" {
		t.Fatalf("newest first: %v", got)
	}
	if got := ids(st.Jobs(JobFilter{Newest: true, AfterID: "c", Limit: 1})); fmt.Sprint(got) != "[b]" {
		t.Fatalf("page after c: %v", got)
	}
	if got := ids(st.Jobs(JobFilter{Phase: PhaseCompleted})); fmt.Sprint(got) != "[a c]" {
		t.Fatalf("completed: %v", got)
	}
	if len(st.RunningOn("n1")) != 0 || len(st.RunningOn("n2")) != 0 {
		t.Fatal("running index kept finished jobs")
	}
}

// A round is checked again when it applies: a drain or revocation
// committed after planning, or a node at the capacity the planner saw,
// gets no new work; the rest of the round applies.
func TestRoundRechecksOnApply(t *testing.T) {
	f := NewFSM()
	drain := &raftpb.Command{Cmd: &raftpb.Command_SetNodeSchedulable{SetNodeSchedulable: &raftpb.SetNodeSchedulable{Id: "n2", Eligible: true, Draining: true}}}
	applyAll(t, f, addNode("n1"), addNode("n2"), submit("a"), submit("b"), submit("c"), drain)
	applyAll(t, f, round(1, map[string]uint32{"n1": 1, "n2": 4}, place("a", 1, "n1"), place("b", 1, "n1"), place("c", 1, "n2"), place("x", 1, "n1")))
	st := f.State()
	a, _ := st.Job("a")
	b, _ := st.Job("b")
	c, _ := st.Job("c")
	if a.Phase != PhaseRunning || b.Phase != PhaseQueued || c.Phase != PhaseQueued {
		t.Fatalf("a %s (want running), b %s (over capacity: queued), c %s (draining node: queued)", a.Phase, b.Phase, c.Phase)
	}
	// Unknown nodes get nothing either.
	applyAll(t, f, round(2, map[string]uint32{"ghost": 9}, place("b", 1, "ghost")))
	if b, _ = st.Job("b"); b.Phase != PhaseQueued {
		t.Fatalf("placed on a node that is not a member: %+v", b)
	}
}

// Requeues and expiries ride the round.
func TestRoundRequeuesAndExpires(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), submit("a"), submitWith("d", func(r *raftpb.JobRecord) { r.DeadlineAtMs = 50 }))
	applyAll(t, f, round(1, map[string]uint32{"n1": 4}, place("a", 1, "n1")))
	r := &raftpb.SchedulerRound{AtMs: 60, Requeues: []*raftpb.RequeueJob{{Id: "a", Attempt: 1}}, Expire: []string{"d"}}
	applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: r}})
	a, _ := f.State().Job("a")
	d, _ := f.State().Job("d")
	if a.Phase != PhaseQueued || a.Attempt != 1 || d.Phase != PhaseExpired {
		t.Fatalf("a %s/%d, d %s", a.Phase, a.Attempt, d.Phase)
	}
	if got := f.State().DeadlinesBefore(1<<60, 10); len(got) != 0 {
		t.Fatalf("deadline index kept an expired job: %v", ids(got))
	}
}

// Arrays: one entry makes every task; counts per phase; cancel cancels
// the rest; pruning takes the whole array once all tasks ended.
func TestArrayLifecycle(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), array("arr", "x", "y", "z"))
	st := f.State()
	a, ok := st.Array("arr")
	if !ok || a.Size != 3 || a.Count(PhaseQueued) != 3 {
		t.Fatalf("array %+v", a)
	}
	if got := ids(st.Jobs(JobFilter{ArrayID: "arr"})); fmt.Sprint(got) != "[arr.0 arr.1 arr.2]" {
		t.Fatalf("tasks %v", got)
	}
	if j, _ := st.Job("arr.1"); string(j.Input) != "y" || j.ModuleHash != "mod" || j.ArrayIndex != 1 {
		t.Fatalf("task 1: %+v", j)
	}
	applyAll(t, f, round(1, map[string]uint32{"n1": 4}, place("arr.0", 1, "n1")), batch(finishAt("arr.0", 1, "n1", 100)))
	cancel := &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: "arr", AtMs: 200}}}
	applyAll(t, f, cancel)
	a, _ = st.Array("arr")
	if a.Count(PhaseCompleted) != 1 || a.Count(PhaseAborted) != 2 || !a.Terminal() || a.EndedAtMS != 200 {
		t.Fatalf("after cancel: %+v", a)
	}
	if !st.BlobReferenced("mod") {
		t.Fatal("the array's module is unreferenced before pruning")
	}
	if n200, n201 := st.EndedBefore(200), st.EndedBefore(201); n200 != 0 || n201 != 3 {
		t.Fatalf("a dry run counts %d before 200 and %d before 201, want 0 and the array's 3 tasks", n200, n201)
	}
	applyAll(t, f, prune(200)) // ended at 200: not before 200
	if _, ok := st.Array("arr"); !ok {
		t.Fatal("pruned an array that ended at the cut-off")
	}
	if r := applyAll(t, f, prune(201)); r[0].Job.Attempt != 3 {
		t.Fatalf("prune removed %d jobs, want the array's 3", r[0].Job.Attempt)
	}
	if _, ok := st.Array("arr"); ok || st.JobCount() != 0 || st.BlobReferenced("mod") {
		t.Fatalf("after pruning: array present %v, %d jobs, module referenced %v", ok, st.JobCount(), st.BlobReferenced("mod"))
	}
}

// Pruning removes terminal jobs ended before the cut-off, with their
// idempotency records and blob references; queued and running stay.
func TestPruneTerminalOnly(t *testing.T) {
	f := NewFSM()
	withKey := submitWith("k", func(r *raftpb.JobRecord) { r.IdempotencyKey = "key"; r.PayloadHash = hash("p") })
	applyAll(t, f, addNode("n1"), submit("done"), withKey, submit("running"), submit("queued"))
	applyAll(t, f, round(1, map[string]uint32{"n1": 8}, place("done", 1, "n1"), place("k", 1, "n1"), place("running", 1, "n1")))
	big := finishAt("done", 1, "n1", 10)
	big.Stdout, big.StdoutSha256, big.StdoutSize = nil, "outhash", 1<<20
	applyAll(t, f, batch(big, finishAt("k", 1, "n1", 10)))
	st := f.State()
	if !st.BlobReferenced("outhash") {
		t.Fatal("output blob not referenced")
	}
	if got, ok := st.OldestEnded(); !ok || got != 10 {
		t.Fatalf("oldest ended %d %v", got, ok)
	}
	applyAll(t, f, prune(11))
	if _, ok := st.Job("done"); ok {
		t.Fatal("terminal job survived pruning")
	}
	for _, id := range []string{"running", "queued"} {
		if _, ok := st.Job(id); !ok {
			t.Fatalf("pruning removed %s", id)
		}
	}
	if st.BlobReferenced("outhash") {
		t.Fatal("pruned job's output blob still referenced")
	}
	// The idempotency key is free again: a new submission with it is new.
	again := submitWith("k2", func(r *raftpb.JobRecord) { r.IdempotencyKey = "key"; r.PayloadHash = hash("other") })
	if r := applyAll(t, f, again); r[0].Err != nil || r[0].Job.ID != "k2" {
		t.Fatalf("reusing a pruned job's key: %+v", r[0])
	}
}

// A snapshot streams every job, array and plane, and a restored FSM has
// the same state, indexes and applied index.
func TestSnapshotStreamsAndRestoresIndex(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), submit("a"), array("arr", "1", "2"), submit("b"))
	applyAll(t, f, round(1, map[string]uint32{"n1": 8}, place("a", 1, "n1"), place("arr.1", 1, "n1")), batch(finishAt("a", 1, "n1", 5)))
	data := snapshotBytes(t, f)
	// Applies after the snapshot is taken do not leak into it.
	snap, _ := f.Snapshot()
	applyAll(t, f, submit("later"))
	var buf bytes.Buffer
	if err := snap.(*fsmSnapshot).write(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), data) {
		t.Fatal("a snapshot changed after later applies")
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	st := g.State()
	if st.AppliedIndex() != 6 {
		t.Fatalf("restored applied index %d, want 6", st.AppliedIndex())
	}
	if got := ids(st.Jobs(JobFilter{})); fmt.Sprint(got) != "[a arr.0 arr.1 b]" {
		t.Fatalf("restored jobs %v", got)
	}
	if got := ids(st.RunningOn("n1")); fmt.Sprint(got) != "[arr.1]" {
		t.Fatalf("restored running index %v", got)
	}
	if a, ok := st.Array("arr"); !ok || a.Count(PhaseRunning) != 1 || a.Count(PhaseQueued) != 1 {
		t.Fatalf("restored array %+v", a)
	}
	if a, _ := st.Job("a"); string(a.Stdout) != "out-a" {
		t.Fatalf("restored result %q", a.Stdout)
	}
	// Restoring and snapshotting again gives the same bytes.
	if !bytes.Equal(snapshotBytes(t, g), data) {
		t.Fatal("snapshot of the restored state differs")
	}
	// A truncated snapshot is refused, not half-restored.
	if err := NewFSM().Restore(io.NopCloser(bytes.NewReader(data[:len(data)-3]))); err == nil {
		t.Fatal("truncated snapshot restored")
	}
}

// Snapshots written before they streamed (one Snapshot message) restore.
func TestRestoresVersion1Snapshot(t *testing.T) {
	old := &raftpb.Snapshot{Version: 1, Jobs: []*raftpb.JobRecord{
		{Id: "a", Kind: "wasm", Phase: uint32(PhaseCompleted), CommitIndex: 3, FinishedAtMs: 9},
		{Id: "b", Kind: "wasm", Phase: uint32(PhaseQueued), CommitIndex: 4},
	}}
	data, err := proto.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if c := f.State().CountByPhase(); c[PhaseCompleted] != 1 || c[PhaseQueued] != 1 {
		t.Fatalf("counts %v", c)
	}
	if at, ok := f.State().OldestEnded(); !ok || at != 9 {
		t.Fatalf("retention index not rebuilt: %d %v", at, ok)
	}
}

// Watchers wake for their topic: a job's watcher for that job only, a
// node's for placements there.
func TestTopicsWakeOnlyTheirWatchers(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), submit("a"), submit("b"))
	st := f.State()
	wa, wb, wn := st.Watch(TopicJob("a")), st.Watch(TopicJob("b")), st.Watch(TopicNode("n1"))
	applyAll(t, f, round(1, map[string]uint32{"n1": 1}, place("a", 1, "n1")))
	select {
	case <-wa:
	default:
		t.Fatal("a's watcher not woken by its placement")
	}
	select {
	case <-wn:
	default:
		t.Fatal("n1's watcher not woken by a placement there")
	}
	select {
	case <-wb:
		t.Fatal("b's watcher woken by a's placement")
	default:
	}
}

// The FSM's apply is deterministic: two replicas fed the same log end
// with byte-identical snapshots.
func TestReplicasAgree(t *testing.T) {
	var log []*raftpb.Command
	log = append(log, addNode("n1"), addNode("n2"))
	for i := range 50 {
		log = append(log, submit(fmt.Sprint("j", i)))
	}
	log = append(log, array("arr", "a", "b", "c", "d"))
	var ps []*raftpb.AssignJob
	for i := range 20 {
		ps = append(ps, place(fmt.Sprint("j", i), 1, []string{"n1", "n2"}[i%2]))
	}
	log = append(log, round(5, map[string]uint32{"n1": 6, "n2": 6}, ps...))
	var fin []*raftpb.FinishJob
	for i := range 20 {
		fin = append(fin, finishAt(fmt.Sprint("j", i), 1, []string{"n1", "n2"}[i%2], int64(10+i)))
	}
	log = append(log, batch(fin...), prune(15))
	a, b := NewFSM(), NewFSM()
	applyAll(t, a, log...)
	applyAll(t, b, log...)
	if !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, b)) {
		t.Fatal("replicas diverged")
	}
	if n := a.State().JobCount(); n != 54-5 {
		t.Fatalf("%d jobs after pruning the 5 that ended before 15", n)
	}
}

var _ raft.FSMSnapshot = (*fsmSnapshot)(nil)

// Array tasks may use a node's prefetch capacity; single jobs only its
// slots.
func TestPrefetchOnlyForArrayTasks(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), array("arr", "1", "2", "3"), submit("single"))
	r := &raftpb.SchedulerRound{AtMs: 1, Slots: []*raftpb.NodeSlots{
		{NodeId: "n1", Kind: "wasm", Slots: 1}, {NodeId: "n1", Kind: "wasm" + PrefetchSuffix, Slots: 3}},
		Placements: []*raftpb.AssignJob{place("arr.0", 1, "n1"), place("arr.1", 1, "n1"), place("single", 1, "n1"), place("arr.2", 1, "n1")}}
	applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: r}})
	st := f.State()
	var phases []string
	for _, id := range []string{"arr.0", "arr.1", "single", "arr.2"} {
		j, _ := st.Job(id)
		phases = append(phases, j.Phase.String())
	}
	if fmt.Sprint(phases) != "[running running queued running]" {
		t.Fatalf("phases %v: want the single job kept queued past the node's one slot, the tasks prefetched up to 3", phases)
	}
}

// An idempotency key used by an array is not taken over by a single job.
func TestArrayKeyNotTakenBySingleJob(t *testing.T) {
	f := NewFSM()
	arr := array("arr", "x")
	arr.GetSubmitArray().Template.IdempotencyKey = "k"
	arr.GetSubmitArray().Template.PayloadHash = hash("p")
	single := submitWith("j", func(r *raftpb.JobRecord) { r.IdempotencyKey = "k"; r.PayloadHash = hash("p") })
	r := applyAll(t, f, arr, single)
	if r[1].Err == nil {
		t.Fatal("a single job reused an array's idempotency key")
	}
	if _, ok := f.State().Job("j"); ok {
		t.Fatal("the conflicting job was accepted")
	}
}

// A round the leader attached to a command applies after it, in the same
// entry: a submitted job is running once its submit commits, and a batch
// of results hands the slots it frees on to queued jobs.
func TestAttachedRoundAppliesAfterItsCommand(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"))
	withRound := func(c *raftpb.Command, r *raftpb.Command) *raftpb.Command {
		c.Round = r.GetSchedulerRound()
		return c
	}
	applyAll(t, f, withRound(submit("a"), round(1, map[string]uint32{"n1": 1}, place("a", 1, "n1"))))
	st := f.State()
	if a, _ := st.Job("a"); a.Phase != PhaseRunning || a.NodeID != "n1" || a.Attempt != 1 {
		t.Fatalf("a after its submit with a placement attached: %+v", a)
	}
	// n1 is full: b's attached placement is refused and b stays queued.
	applyAll(t, f, withRound(submit("b"), round(2, map[string]uint32{"n1": 1}, place("b", 1, "n1"))))
	if b, _ := st.Job("b"); b.Phase != PhaseQueued {
		t.Fatalf("b placed beyond n1's one slot: %+v", b)
	}
	// a's result frees the slot before the attached round places b on it.
	applyAll(t, f, withRound(batch(finishAt("a", 1, "n1", 3)), round(3, map[string]uint32{"n1": 1}, place("b", 1, "n1"))))
	a, _ := st.Job("a")
	b, _ := st.Job("b")
	if a.Phase != PhaseCompleted || b.Phase != PhaseRunning || b.NodeID != "n1" {
		t.Fatalf("after a's result with b's placement attached: a %s, b %s on %q", a.Phase, b.Phase, b.NodeID)
	}
}

// Arrays are listed from their own index, newest first or oldest first,
// with a cursor; the index follows pruning and a snapshot restore.
func TestArraysAreListedFromTheirIndex(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), array("a1", "x"), submit("plain"), array("a2", "y", "z"), array("a3", "w"))
	arrayIDs := func(as []Array) (out []string) {
		for _, a := range as {
			out = append(out, a.Template.ID)
		}
		return out
	}
	check := func(st *State) {
		t.Helper()
		if got := arrayIDs(st.Arrays("", 2, true)); !slices.Equal(got, []string{"a3", "a2"}) {
			t.Fatalf("newest first: %v", got)
		}
		if got := arrayIDs(st.Arrays("a2", 2, true)); !slices.Equal(got, []string{"a1"}) {
			t.Fatalf("after a2: %v", got)
		}
		if got := arrayIDs(st.Arrays("", 0, false)); !slices.Equal(got, []string{"a1", "a2", "a3"}) {
			t.Fatalf("oldest first: %v", got)
		}
		if as := st.Arrays("a1", 1, false); len(as) != 1 || as[0].Template.ID != "a2" || as[0].Size != 2 || as[0].Count(PhaseQueued) != 2 {
			t.Fatalf("after a1, oldest first: %+v", as)
		}
	}
	check(f.State())
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	check(g.State())
	// a1 ends and is pruned: it leaves the index.
	applyAll(t, f, round(1000, map[string]uint32{"n1": 8}, place(TaskID("a1", 0), 1, "n1")), batch(finishAt(TaskID("a1", 0), 1, "n1", 2000)), prune(3000))
	if got := arrayIDs(f.State().Arrays("", 0, false)); !slices.Equal(got, []string{"a2", "a3"}) {
		t.Fatalf("after pruning a1: %v", got)
	}
	if got := f.State().Arrays("a1", 0, false); got != nil {
		t.Fatalf("a cursor pruned since started the listing again: %v", arrayIDs(got))
	}
}
