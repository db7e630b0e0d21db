package consensus

import (
	"testing"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// runHereCmd is a RunHere of a job with id on node, run from placed to at.
func runHereCmd(id, node string, placed, at int64, mod func(*raftpb.JobRecord), fin *raftpb.FinishJob) *raftpb.Command {
	if mod == nil {
		mod = func(*raftpb.JobRecord) {}
	}
	sub := submitWith(id, mod).GetSubmitJob()
	if fin == nil {
		fin = &raftpb.FinishJob{Ok: true, Stdout: []byte("out-" + id), AtMs: at, RanUs: (at - placed) * 1000}
	}
	return &raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{Submit: sub, NodeId: node, PlacedAtMs: placed, Finish: fin}}}
}

// A job run where it was submitted is accepted, placed there as attempt 1
// and ended in its one entry, as the three commands would have done.
func TestRunHereRecordsTheJobWithItsResult(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"))
	r := applyAll(t, f, runHereCmd("j", "n1", 1000, 1004, func(r *raftpb.JobRecord) { r.SubmittedAtMs = 999 }, nil))
	if r[0].Err != nil || r[0].Job.Phase != PhaseCompleted {
		t.Fatalf("apply: %+v", r[0])
	}
	j, ok := f.State().Job("j")
	if !ok || j.Phase != PhaseCompleted || j.Attempt != 1 || j.NodeID != "n1" || string(j.Stdout) != "out-j" ||
		j.SubmittedAtMS != 999 || j.PlacedAtMS != 1000 || j.StartedAtMS != 1000 || j.FinishedAtMS != 1004 || j.CommitIndex == 0 {
		t.Fatalf("job %+v", j)
	}
	if n := f.State().Count(PhaseCompleted); n != 1 {
		t.Fatalf("completed count %d", n)
	}
	if n := f.State().Count(PhaseQueued) + f.State().Count(PhaseRunning); n != 0 {
		t.Fatalf("queued+running count %d after a job run here", n)
	}
	if got := f.State().RunningOn("n1"); len(got) != 0 {
		t.Fatalf("running on n1: %v", got)
	}
}

// The same entry again (a resend after an unknown outcome), or the same
// idempotency key with another id: the first job answers, unchanged.
func TestRunHereRepeatedIsTheFirstJob(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), addNode("n2"))
	key := func(r *raftpb.JobRecord) { r.IdempotencyKey = "dev/k"; r.PayloadHash = []byte("p") }
	r := applyAll(t, f,
		runHereCmd("j", "n1", 10, 12, key, nil),
		runHereCmd("j", "n1", 10, 12, key, nil),
		runHereCmd("k", "n2", 20, 25, key, &raftpb.FinishJob{Ok: false, Error: &raftpb.Error{Code: "trap", Message: "x"}, AtMs: 25}))
	for i, res := range r {
		if res.Err != nil || res.Job.ID != "j" || res.Job.Phase != PhaseCompleted || res.Job.NodeID != "n1" {
			t.Fatalf("apply %d: %+v", i, res)
		}
	}
	if n := len(f.State().Jobs(JobFilter{})); n != 1 {
		t.Fatalf("%d jobs after repeats", n)
	}
}

// A node that may take no work leaves the job queued for the scheduler,
// and so does a job that must wait for someone's approval: the run is
// dropped, the job accepted.
func TestRunHereOnANodeThatTakesNoWorkQueuesTheJob(t *testing.T) {
	f := NewFSM()
	drain := &raftpb.Command{Cmd: &raftpb.Command_SetNodeSchedulable{SetNodeSchedulable: &raftpb.SetNodeSchedulable{Id: "n2", Eligible: true, Draining: true}}}
	applyAll(t, f, addNode("n1"), addNode("n2"), drain)
	approval := func(r *raftpb.JobRecord) { r.RequiresApproval = true; r.DeadlineAtMs = 10_000 }
	r := applyAll(t, f,
		runHereCmd("drained", "n2", 10, 12, nil, nil),
		runHereCmd("stranger", "n9", 10, 12, nil, nil),
		runHereCmd("approval", "n1", 10, 12, approval, nil))
	for i, want := range []Phase{PhaseQueued, PhaseQueued, PhaseWaitingForApproval} {
		if r[i].Err != nil || r[i].Job.Phase != want || r[i].Job.Attempt != 0 || r[i].Job.NodeID != "" || len(r[i].Job.Stdout) != 0 {
			t.Fatalf("apply %d: %+v, want %s and no run", i, r[i], want)
		}
	}
}

// A run that failed in a way worth retrying leaves the job queued for
// its next attempt, as a worker's result would.
func TestRunHereFailureIsRetriedAsUsual(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"))
	fail := &raftpb.FinishJob{Retryable: true, AtMs: 1000, Error: &raftpb.Error{Code: "timeout", Message: "slow"}}
	r := applyAll(t, f, runHereCmd("j", "n1", 990, 1000, func(r *raftpb.JobRecord) { r.MaxRetries = 1 }, fail))
	if r[0].Err != nil || r[0].Job.Phase != PhaseQueued || r[0].Job.RetriesUsed != 1 || r[0].Job.NotBeforeMS != 2000 ||
		len(r[0].Job.Earlier) != 1 || r[0].Job.Earlier[0].NodeID != "n1" {
		t.Fatalf("retryable failure run here: %+v", r[0].Job)
	}
}

// The leader stamps the result with its clock; the placement moves with
// it, so the run keeps its length; the submission keeps its own time and
// its deadline is rebased onto the leader's clock, as a submit's is.
func TestRunHereTimes(t *testing.T) {
	cmd := runHereCmd("j", "n1", 1000, 1040, func(r *raftpb.JobRecord) { r.SubmittedAtMs = 990; r.DeadlineAtMs = 5990 }, nil)
	out := stampLeaderTime(cmd, 50_000).GetRunHere()
	if out.Finish.AtMs != 50_000 || out.PlacedAtMs != 49_960 {
		t.Fatalf("stamped finish %d placed %d, want 50000 and 49960", out.Finish.AtMs, out.PlacedAtMs)
	}
	if j := out.Submit.Job; j.SubmittedAtMs != 990 || j.DeadlineAtMs != 55_000 {
		t.Fatalf("the submission's times: %+v, want submitted 990 and the deadline 5 s after the leader's 50000", j)
	}
	if got := cmd.GetRunHere().Finish.AtMs; got != 1040 {
		t.Fatalf("the proposer's command changed: %d", got)
	}
}

// RunHere may travel in a group commit with other submissions.
func TestRunHereIsBatchable(t *testing.T) {
	if !Batchable(runHereCmd("j", "n1", 1, 2, nil, nil)) {
		t.Fatal("RunHere is not batchable")
	}
	f := NewFSM()
	applyAll(t, f, addNode("n1"))
	b := &raftpb.Command{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: []*raftpb.Command{
		runHereCmd("a", "n1", 1, 2, nil, nil), submitWith("b", func(*raftpb.JobRecord) {}), runHereCmd("c", "n1", 1, 3, nil, nil)}}}}
	r := applyAll(t, f, b)
	if len(r[0].Each) != 3 || r[0].Each[0].Job.Phase != PhaseCompleted || r[0].Each[1].Job.Phase != PhaseQueued || r[0].Each[2].Job.Phase != PhaseCompleted {
		t.Fatalf("batch: %+v", r[0].Each)
	}
}

// The FSM holds every RunHere to what the API promises: a job with a
// grant, a deadline, a stored input or a schema is only submitted, its
// run dropped, whoever sent the entry.
func TestRunHereOnlyForJobsWithoutEffects(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"))
	for name, mod := range map[string]func(*raftpb.JobRecord){
		"secret":   func(r *raftpb.JobRecord) { r.SecretNames = []string{"s"} },
		"kv":       func(r *raftpb.JobRecord) { r.KvPrefix = "p/" },
		"host":     func(r *raftpb.JobRecord) { r.AllowHosts = []string{"example.org"} },
		"private":  func(r *raftpb.JobRecord) { r.AllowPrivate = true },
		"deadline": func(r *raftpb.JobRecord) { r.DeadlineAtMs = 99_999 },
		"blob":     func(r *raftpb.JobRecord) { r.InputSha256 = "ab"; r.InputSize = 9000 },
		"schema":   func(r *raftpb.JobRecord) { r.OutputSchema = "{}" },
		"browser":  func(r *raftpb.JobRecord) { r.Kind = "browser" },
	} {
		r := applyAll(t, f, runHereCmd(name, "n1", 10, 12, mod, nil))
		if r[0].Err != nil || r[0].Job.Phase != PhaseQueued || r[0].Job.Attempt != 0 || len(r[0].Job.Stdout) != 0 {
			t.Errorf("%s: %+v, want it queued and its run dropped", name, r[0].Job)
		}
	}
	// A placement stamped before the submission (the leader's clock
	// behind the proposer's) is taken as the submission's time.
	f = NewFSM()
	applyAll(t, f, addNode("n1"))
	r := applyAll(t, f, runHereCmd("early", "n1", 5, 8, func(r *raftpb.JobRecord) { r.SubmittedAtMs = 7 }, nil))
	if j := r[0].Job; j.Phase != PhaseCompleted || j.PlacedAtMS != 7 {
		t.Fatalf("placed before submitted: %+v", j)
	}
}

// QueuedReady sees a queued job that could be placed now, and not one
// backing off before a retry or held by the scheduler's reason.
func TestQueuedReady(t *testing.T) {
	f := NewFSM()
	st := f.State()
	if st.QueuedReady("wasm", 0, 64) {
		t.Fatal("an empty queue has a ready job")
	}
	pending := &raftpb.Command{Cmd: &raftpb.Command_SetPendingReason{SetPendingReason: &raftpb.SetPendingReason{Id: "stuck", Reason: "no node matches"}}}
	applyAll(t, f, submitWith("stuck", func(*raftpb.JobRecord) {}), pending,
		submitWith("j", func(r *raftpb.JobRecord) { r.MaxRetries = 1 }), assign("j", 1, "n1"), failAt("j", 1, "n1", true, 1000))
	if st.QueuedReady("wasm", 1500, 64) {
		t.Fatal("a stuck job and one backing off until 2000 count as ready at 1500")
	}
	if !st.QueuedReady("wasm", 2000, 64) {
		t.Fatal("the retry is due at 2000 and not seen ready")
	}
	if st.QueuedReady("browser", 5000, 64) {
		t.Fatal("another kind's queue has a ready job")
	}
	applyAll(t, f, submitWith("fresh", func(*raftpb.JobRecord) {}))
	if !st.QueuedReady("wasm", 1500, 64) {
		t.Fatal("a fresh submission is not seen ready")
	}
}
