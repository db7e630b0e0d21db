package consensus

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

func submitWith(id string, mod func(*raftpb.JobRecord)) *raftpb.Command {
	r := &raftpb.JobRecord{Id: id, Kind: "wasm", ModuleSha256: "ab"}
	mod(r)
	return &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: r}}}
}

func failAt(id string, attempt uint32, node string, retryable bool, at int64) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: id, Attempt: attempt, NodeId: node,
		Retryable: retryable, AtMs: at, Error: &raftpb.Error{Code: "exit_code", Message: "boom"}}}}
}

func TestRetriesWithBackoffThenFail(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, submitWith("j", func(r *raftpb.JobRecord) { r.MaxRetries = 2 }), assign("j", 1, "n1"), failAt("j", 1, "n1", true, 1000))
	j, _ := f.State().Job("j")
	if j.Phase != PhaseQueued || j.RetriesUsed != 1 || j.NotBeforeMS != 2000 || j.Error == nil {
		t.Fatalf("after first failure: %+v", j)
	}
	applyAll(t, f, assign("j", 2, "n2"), failAt("j", 2, "n2", true, 5000))
	j, _ = f.State().Job("j")
	if j.Phase != PhaseQueued || j.NotBeforeMS != 7000 {
		t.Fatalf("second backoff: %+v", j)
	}
	applyAll(t, f, assign("j", 3, "n1"), failAt("j", 3, "n1", true, 9000))
	if j, _ = f.State().Job("j"); j.Phase != PhaseFailed || j.RetriesUsed != 2 {
		t.Fatalf("retries exhausted: %+v", j)
	}
	// A non-retryable failure fails at once.
	applyAll(t, f, submitWith("k", func(r *raftpb.JobRecord) { r.MaxRetries = 5 }), assign("k", 1, "n1"), failAt("k", 1, "n1", false, 1))
	if k, _ := f.State().Job("k"); k.Phase != PhaseFailed {
		t.Fatalf("non-retryable: %+v", k)
	}
}

func TestExpiry(t *testing.T) {
	f := NewFSM()
	exp := func(at int64) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_ExpireJob{ExpireJob: &raftpb.ExpireJob{Id: "j", AtMs: at}}}
	}
	r := applyAll(t, f, submitWith("j", func(r *raftpb.JobRecord) { r.DeadlineAtMs = 100 }), exp(99), assign("j", 1, "n"), exp(100), finish("j", 1, "n", "late"))
	if !errors.Is(r[1].Err, ErrConflict) || r[3].Err != nil || !errors.Is(r[4].Err, ErrStaleAttempt) {
		t.Fatalf("results %v %v %v", r[1].Err, r[3].Err, r[4].Err)
	}
	if j, _ := f.State().Job("j"); j.Phase != PhaseExpired || j.Error.Code != "expired" {
		t.Fatalf("job %+v", j)
	}
}

func TestIdempotencyKeys(t *testing.T) {
	f := NewFSM()
	withKey := func(id, key, payload string) *raftpb.Command {
		return submitWith(id, func(r *raftpb.JobRecord) { r.IdempotencyKey = key; r.PayloadHash = []byte(payload) })
	}
	r := applyAll(t, f, withKey("a", "k1", "p"), withKey("b", "k1", "p"), withKey("c", "k1", "other"))
	if r[0].Err != nil || r[1].Err != nil || r[1].Job.ID != "a" {
		t.Fatalf("replay: %+v", r[1])
	}
	if !errors.Is(r[2].Err, ErrConflict) {
		t.Fatalf("different payload: %v", r[2].Err)
	}
	if len(f.State().Jobs(JobFilter{})) != 1 {
		t.Fatal("replays created jobs")
	}
	// The index survives a snapshot.
	f2 := NewFSM()
	restore(t, f, f2)
	r = applyAll(t, f2, withKey("d", "k1", "p"))
	if r[0].Job.ID != "a" {
		t.Fatalf("replay after restore: %+v", r[0])
	}
}

// A job's key-value writes are fenced like its result: only the attempt
// running now, on its node, writes; a requeue a worker sends names its
// node and cannot return another node's job.
func TestWritesFencedByAttempt(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), addNode("n2"), submit("a"), round(1, map[string]uint32{"n1": 1}, place("a", 1, "n1")))
	put := func(attempt uint32, node string) error {
		return applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", Value: []byte(node), JobId: "a", Attempt: attempt, NodeId: node}}})[0].Err
	}
	if err := put(1, "n1"); err != nil {
		t.Fatalf("the current attempt's write: %v", err)
	}
	for _, tc := range []struct {
		attempt uint32
		node    string
	}{{2, "n1"}, {1, "n2"}} {
		if err := put(tc.attempt, tc.node); !errors.Is(err, ErrStaleAttempt) {
			t.Fatalf("write from attempt %d on %s: %v; want stale_attempt", tc.attempt, tc.node, err)
		}
	}
	del := applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{Key: "k", JobId: "a", Attempt: 1, NodeId: "n2"}}})[0].Err
	if !errors.Is(del, ErrStaleAttempt) {
		t.Fatalf("delete from another node: %v", del)
	}
	if v, ok := f.State().KV("k"); !ok || string(v) != "n1" {
		t.Fatalf("k = %q, %v; want the current attempt's write only", v, ok)
	}
	rq := applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{Id: "a", Attempt: 1, NodeId: "n2"}}})[0].Err
	if !errors.Is(rq, ErrStaleAttempt) {
		t.Fatalf("n2 returning n1's job: %v", rq)
	}
	applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{Id: "a", Attempt: 1, NodeId: "n1"}}})
	if a, _ := f.State().Job("a"); a.Phase != PhaseQueued {
		t.Fatalf("a after n1 returned it: %s", a.Phase)
	}
	if err := put(1, "n1"); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("write after the job was re-queued: %v", err)
	}
}

func batchOf(cmds ...*raftpb.Command) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: cmds}}}
}

// A CommandBatch applies each command in order at its index with its own
// verdict: a conflict or a refusal fails that command only, a command that
// may not be batched (or a nested batch) is refused on its own, the jobs it
// accepts are all indexed, and the cluster clock takes every command's
// time.
func TestCommandBatchAppliesEachOnItsOwn(t *testing.T) {
	f := NewFSM()
	res := applyAll(t, f,
		submitWith("a", func(r *raftpb.JobRecord) { r.SubmittedAtMs = 10 }),
		batchOf(
			submitWith("b", func(r *raftpb.JobRecord) { r.SubmittedAtMs = 20 }),
			submitWith("a", func(r *raftpb.JobRecord) { r.SubmittedAtMs = 99 }), // same id, other content
			&raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: "a", AtMs: 500}}},
			&raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: "nope", AtMs: 30}}},
			&raftpb.Command{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{Source: []byte("x"), AtMs: 40}}},
			batchOf(submitWith("nested", func(*raftpb.JobRecord) {})),
			submitWith("c", func(r *raftpb.JobRecord) { r.SubmittedAtMs = 30 }),
		),
	)
	each := res[1].Each
	if res[1].Err != nil || len(each) != 7 {
		t.Fatalf("batch: err %v, %d results; want 7 results", res[1].Err, len(each))
	}
	if each[0].Err != nil || each[0].Job.ID != "b" || each[0].Job.Phase != PhaseQueued {
		t.Fatalf("b: %+v %v", each[0].Job, each[0].Err)
	}
	if !errors.Is(each[1].Err, ErrConflict) {
		t.Fatalf("a resubmitted with other content: %v, want a conflict", each[1].Err)
	}
	if each[2].Err != nil || each[2].Job.Phase != PhaseAborted {
		t.Fatalf("cancel a: %+v %v", each[2].Job, each[2].Err)
	}
	if !errors.Is(each[3].Err, ErrNotFound) {
		t.Fatalf("cancel of an unknown job: %v", each[3].Err)
	}
	for _, i := range []int{4, 5} {
		if !errors.Is(each[i].Err, ErrInvalid) {
			t.Fatalf("command %d (may not be batched): %v, want invalid", i, each[i].Err)
		}
	}
	if each[6].Err != nil || each[6].Job.ID != "c" {
		t.Fatalf("c: %+v %v", each[6].Job, each[6].Err)
	}
	st := f.State()
	if _, ok := st.Job("nested"); ok {
		t.Fatal("a nested batch was applied")
	}
	if st.Count(PhaseQueued) != 2 || len(st.Jobs(JobFilter{Phase: PhaseQueued})) != 2 {
		t.Fatalf("queued: count %d, listed %d; want b and c", st.Count(PhaseQueued), len(st.Jobs(JobFilter{Phase: PhaseQueued})))
	}
	if st.ClockMS() != 500 {
		t.Fatalf("cluster clock %d after the batch; want 500, the cancel's time", st.ClockMS())
	}
}

// LiveModules lists the modules unfinished wasm jobs run, once each, and
// TopicModules fires when a module gets its first unfinished job (not for
// more jobs of it); a module leaves when its last job ends, browser jobs
// never count, and a restored state has the same index.
func TestLiveModules(t *testing.T) {
	f := NewFSM()
	st := f.State()
	first := st.Watch(TopicModules)
	applyAll(t, f, submitWith("a", func(r *raftpb.JobRecord) { r.ModuleSha256 = "m1" }))
	select {
	case <-first:
	default:
		t.Fatal("a new module did not fire TopicModules")
	}
	again := st.Watch(TopicModules)
	applyAll(t, f, submitWith("b", func(r *raftpb.JobRecord) { r.ModuleSha256 = "m1" }),
		submitWith("c", func(r *raftpb.JobRecord) { r.ModuleSha256 = "m2" }),
		submitWith("shot", func(r *raftpb.JobRecord) { r.Kind, r.ModuleSha256 = "browser", "" }))
	select {
	case <-again:
	default:
		t.Fatal("m2 did not fire TopicModules")
	}
	if got := st.LiveModules(); len(got) != 2 || got[0] != "m1" || got[1] != "m2" {
		t.Fatalf("live modules %v, want [m1 m2]", got)
	}
	applyAll(t, f, assign("a", 1, "n1"), &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: "a", Attempt: 1, NodeId: "n1", Ok: true, AtMs: 5}}},
		&raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: "c", AtMs: 6}}})
	if got := st.LiveModules(); len(got) != 1 || got[0] != "m1" {
		t.Fatalf("after a ended (b still queued) and c cancelled: %v, want [m1]", got)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if got := g.State().LiveModules(); len(got) != 1 || got[0] != "m1" {
		t.Fatalf("restored: %v, want [m1]", got)
	}
}

// A job's key-value write sent again with its run and sequence number
// (the worker never learnt the first one's outcome: the leader was lost
// under it) is applied once: it does not overwrite a later write to the
// key by someone else. Another run of the same attempt (the worker runs it
// again when its result could not be recorded) numbers its writes afresh
// and they apply, as do a new attempt's; writes without a seq (an
// operator's, or entries from before seq existed) apply as always. The
// sequence survives a snapshot.
func TestRetriedKVWriteAppliesOnce(t *testing.T) {
	put := func(job string, attempt uint32, run, seq uint64, val string) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", Value: []byte(val), JobId: job, Attempt: attempt, NodeId: "n1", Seq: seq, Run: run}}}
	}
	del := func(job string, attempt uint32, run, seq uint64) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{Key: "k", JobId: job, Attempt: attempt, NodeId: "n1", Seq: seq, Run: run}}}
	}
	value := func(f *FSM) string { v, _ := f.State().KV("k"); return string(v) }
	f := NewFSM()
	for _, r := range applyAll(t, f, submitWith("a", func(*raftpb.JobRecord) {}), assign("a", 1, "n1"),
		put("a", 1, 7, 1, "first"),
		put("", 0, 0, 0, "operator"), // another writer, after
		put("a", 1, 7, 1, "first"),   // the retry of seq 1
	) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if got := value(f); got != "operator" {
		t.Fatalf("after a retried write: %q, want the later write kept", got)
	}
	applyAll(t, f, del("a", 1, 7, 2), put("", 0, 0, 0, "again"), del("a", 1, 7, 2))
	if got := value(f); got != "again" {
		t.Fatalf("after a retried delete: %q, want the later write kept", got)
	}
	applyAll(t, f, put("a", 1, 7, 3, "third"))
	if got := value(f); got != "third" {
		t.Fatalf("a new write of the run: %q", got)
	}

	// Through a snapshot, a retry is still known as one.
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	applyAll(t, g, put("", 0, 0, 0, "op2"), put("a", 1, 7, 3, "third"))
	if got := value(g); got != "op2" {
		t.Fatalf("after a snapshot, a retried write: %q", got)
	}

	// The same attempt run again: its writes start at 1 and apply.
	if r := applyAll(t, f, put("a", 1, 9, 1, "rerun"))[0]; r.Err != nil || value(f) != "rerun" {
		t.Fatalf("another run's first write: %v %q", r.Err, value(f))
	}
	// A new attempt too.
	applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{Id: "a", Attempt: 1, NodeId: "n1"}}}, assign("a", 2, "n1"))
	if r := applyAll(t, f, put("a", 2, 11, 1, "second attempt"))[0]; r.Err != nil || value(f) != "second attempt" {
		t.Fatalf("the second attempt's first write: %v %q", r.Err, value(f))
	}
	// Without seq: applied every time.
	applyAll(t, f, put("a", 2, 0, 0, "x"), put("", 0, 0, 0, "y"), put("a", 2, 0, 0, "x"))
	if got := value(f); got != "x" {
		t.Fatalf("writes without seq: %q", got)
	}
}

// A numbered key-value write records its sequence in the job without
// waking the job's watchers or its worker's reconcile (every write of a
// job writing many keys did), and every index serves the updated record.
func TestKVWriteWakesNobody(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, submitWith("a", func(*raftpb.JobRecord) {}), assign("a", 1, "n1"))
	st := f.State()
	job, node, queue := st.Watch(TopicJob("a")), st.Watch(TopicNode("n1")), st.Watch(TopicQueue)
	put := &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", Value: []byte("v"), JobId: "a", Attempt: 1, NodeId: "n1", Seq: 1, Run: 7}}}
	if r := applyAll(t, f, put)[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	for name, ch := range map[string]<-chan struct{}{"job": job, "node": node, "queue": queue} {
		select {
		case <-ch:
			t.Errorf("the write woke the %s's watchers", name)
		default:
		}
	}
	if j, _ := st.Job("a"); j.KVSeq != 1 || j.KVSeqRun != 7 {
		t.Fatalf("job record: seq %d run %d", j.KVSeq, j.KVSeqRun)
	}
	for _, j := range st.Jobs(JobFilter{Phase: PhaseRunning}) {
		if j.ID == "a" && j.KVSeq != 1 {
			t.Fatalf("the phase index serves the old record: seq %d", j.KVSeq)
		}
	}
	for _, j := range st.Jobs(JobFilter{}) {
		if j.ID == "a" && j.KVSeq != 1 {
			t.Fatalf("the order index serves the old record: seq %d", j.KVSeq)
		}
	}
	if on := st.RunningOn("n1"); len(on) != 1 || on[0].KVSeq != 1 {
		t.Fatalf("the running index: %+v", on)
	}
	// The job still ends, and leaves every index, as any other.
	applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: "a", Attempt: 1, NodeId: "n1", Ok: true, AtMs: 6}}})
	if j, _ := st.Job("a"); j.Phase != PhaseCompleted || st.Count(PhaseRunning) != 0 || len(st.Jobs(JobFilter{Phase: PhaseRunning})) != 0 {
		t.Fatalf("after finishing: phase %s, running count %d", j.Phase, st.Count(PhaseRunning))
	}
}

// The output a run had written when its job was cancelled under it is kept
// on the ended job (FinishJob.ended_output), from the attempt and node the
// job ended on only; the job keeps its phase, error and times. A job that
// has not ended, another attempt's or node's output, and an ordinary
// result for the ended job are refused as stale and change nothing.
func TestEndedOutputIsKeptOnTheEndedJob(t *testing.T) {
	ended := func(id string, attempt uint32, node, out string) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{
			Id: id, Attempt: attempt, NodeId: node, EndedOutput: true, Stdout: []byte(out), Stderr: []byte("e"), FuelUsed: 7, AtMs: 50}}}
	}
	f := NewFSM()
	applyAll(t, f, submit("a"), assign("a", 1, "n1"), submit("b"), assign("b", 1, "n1"))
	// Not ended yet: refused, and the job runs on.
	if r := applyAll(t, f, ended("a", 1, "n1", "early"))[0]; !errors.Is(r.Err, ErrStaleAttempt) {
		t.Fatalf("output of a running job kept: %v", r.Err)
	}
	applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: "a", AtMs: 40}}})
	before, _ := f.State().Job("a")
	for _, c := range []*raftpb.Command{
		ended("a", 2, "n1", "other attempt"),
		ended("a", 1, "n2", "other node"),
		{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: "a", Attempt: 1, NodeId: "n1", Ok: true, Stdout: []byte("done"), AtMs: 60}}},
	} {
		if r := applyAll(t, f, c)[0]; !errors.Is(r.Err, ErrStaleAttempt) {
			t.Fatalf("%v: %v, want stale", c, r.Err)
		}
	}
	if j, _ := f.State().Job("a"); len(j.Stdout) != 0 || j.Phase != PhaseAborted {
		t.Fatalf("a refused output changed the job: %+v", j)
	}
	if r := applyAll(t, f, ended("a", 1, "n1", "tick 1\n"))[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	j, _ := f.State().Job("a")
	if string(j.Stdout) != "tick 1\n" || string(j.Stderr) != "e" || j.StdoutSize != 7 || j.FuelUsed != 7 ||
		j.Phase != PhaseAborted || j.Error == nil || j.Error.Code != "aborted" || j.FinishedAtMS != before.FinishedAtMS {
		t.Fatalf("ended job after its output: %+v", j)
	}
	if n := f.State().Count(PhaseAborted); n != 1 {
		t.Fatalf("aborted count %d, want 1", n)
	}
	// The same again (the worker never learnt the outcome): the same job.
	if r := applyAll(t, f, ended("a", 1, "n1", "tick 1\n"))[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if again, _ := f.State().Job("a"); string(again.Stdout) != "tick 1\n" {
		t.Fatalf("sent again: %q", again.Stdout)
	}
	// A big output is a blob the job now refers to.
	applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: "b", AtMs: 40}}},
		&raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{
			Id: "b", Attempt: 1, NodeId: "n1", EndedOutput: true, StdoutSha256: "h-out", StdoutSize: 9000, AtMs: 50}}})
	if b, _ := f.State().Job("b"); b.StdoutHash != "h-out" || b.StdoutSize != 9000 || !f.State().BlobReferenced("h-out") {
		t.Fatalf("ended job with a blob output: %+v", b)
	}
}

// KVList pages through the keys under a prefix in order, with a cursor,
// and follows puts, deletes and a snapshot restore.
func TestKVListPagesInKeyOrder(t *testing.T) {
	put := func(k string) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: k, Value: []byte("v-" + k)}}}
	}
	f := NewFSM()
	applyAll(t, f, put("notes/b"), put("notes/a"), put("notesX"), put("other/x"), put("notes/c"), put("no"),
		&raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{Key: "notes/b"}}}, put("notes/d"))
	keys := func(es []KVEntry) (out []string) {
		for _, e := range es {
			out = append(out, e.Key)
		}
		return out
	}
	for _, st := range []*State{f.State(), func() *State {
		g := NewFSM()
		if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
			t.Fatal(err)
		}
		return g.State()
	}()} {
		page, more := st.KVList("notes/", "", 2, 0, false)
		if got := keys(page); !slices.Equal(got, []string{"notes/a", "notes/c"}) || !more || string(page[0].Value) != "v-notes/a" {
			t.Fatalf("first page %v more=%v", got, more)
		}
		page, more = st.KVList("notes/", "notes/c", 2, 0, true)
		if got := keys(page); !slices.Equal(got, []string{"notes/d"}) || more || page[0].Value != nil {
			t.Fatalf("second page %v more=%v (keys only: %q)", got, more, page[0].Value)
		}
		if all, _ := st.KVList("", "", 100, 0, true); !slices.Equal(keys(all), []string{"no", "notes/a", "notes/c", "notes/d", "notesX", "other/x"}) {
			t.Fatalf("all keys %v", keys(all))
		}
		if page, more := st.KVList("zzz", "", 10, 0, false); len(page) != 0 || more {
			t.Fatalf("empty prefix range: %v %v", page, more)
		}
		// A byte bound ends a page early (each value here is 9 bytes), but
		// never before its first entry.
		if page, more := st.KVList("notes/", "", 10, 12, false); !slices.Equal(keys(page), []string{"notes/a"}) || !more {
			t.Fatalf("byte-bounded page %v more=%v", keys(page), more)
		}
		if page, _ := st.KVList("notes/", "", 10, 1, false); len(page) != 1 {
			t.Fatalf("a bound under one value gave %d entries", len(page))
		}
	}
}
