package history

import (
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

func sub(id string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: &raftpb.JobRecord{Id: id}}}}
}
func asg(id string, a uint32, n string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_AssignJob{AssignJob: &raftpb.AssignJob{Id: id, Attempt: a, NodeId: n}}}
}
func fin(id string, a uint32, n, out string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: id, Attempt: a, NodeId: n, Ok: true, Stdout: []byte(out)}}}
}
func req(id string, a uint32) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{Id: id, Attempt: a}}}
}

// The checker must catch each kind of violation: a test that cannot fail
// is worth nothing.
func TestCheckerCatchesViolations(t *testing.T) {
	good := []*raftpb.Command{sub("a"), asg("a", 1, "n1"), req("a", 1), asg("a", 2, "n2"), fin("a", 1, "n1", "stale"), fin("a", 2, "n2", "ok")}
	r := Check(good, []Observed{{ID: "a", Expected: []byte("ok")}})
	if len(r.Violations) != 0 || r.StaleRefused != 1 || r.Requeues != 1 {
		t.Fatalf("good history flagged: %+v", r)
	}
	lost := Check([]*raftpb.Command{sub("a")}, []Observed{{ID: "a", Expected: []byte("x")}, {ID: "never", Expected: []byte("y")}})
	if len(lost.Violations) != 2 {
		t.Fatalf("lost jobs not caught: %v", lost.Violations)
	}
	// A log in which a stale attempt's result was recorded as the outcome:
	// the model refuses it, so the expected output is missing.
	stale := Check([]*raftpb.Command{sub("a"), asg("a", 1, "n1"), req("a", 1), asg("a", 2, "n2"), fin("a", 1, "n1", "stale")},
		[]Observed{{ID: "a", Expected: []byte("stale")}})
	if len(stale.Violations) == 0 || !strings.Contains(stale.Violations[0], "did not complete") {
		t.Fatalf("stale result not caught: %v", stale.Violations)
	}
	// The model and the real FSM agree on a log full of stale and
	// duplicate results.
	noisy := []*raftpb.Command{sub("a"), asg("a", 1, "n1"), fin("a", 1, "n1", "x"), fin("a", 1, "n1", "x-dup"),
		req("a", 1), asg("a", 2, "n1"), fin("a", 2, "n1", "y")}
	if r := Check(noisy, []Observed{{ID: "a", Expected: []byte("x")}}); len(r.Violations) != 0 || r.StaleRefused != 2 {
		t.Fatalf("noisy history: %+v", r)
	}
	// A model that disagrees with the FSM is reported: feed a verdict the
	// FSM cannot share (a result for the wrong node).
	wrongNode := []*raftpb.Command{sub("a"), asg("a", 1, "n1"), fin("a", 1, "n2", "x")}
	if r := Check(wrongNode, []Observed{{ID: "a", Expected: []byte("x")}}); len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "did not complete") {
		t.Fatalf("wrong-node result: %+v", r.Violations)
	}
}

// Group-committed entries (CommandBatch) are replayed command by command,
// by the model as by the FSM: results inside batches are fenced, a
// duplicate in a later batch is refused, and a second result for a job is
// still caught.
func TestCheckerReadsBatches(t *testing.T) {
	batch := func(cmds ...*raftpb.Command) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: cmds}}}
	}
	log := []*raftpb.Command{batch(sub("a"), sub("b")), asg("a", 1, "n1"), asg("b", 1, "n2"),
		batch(fin("a", 1, "n1", "x"), sub("c")), batch(fin("a", 1, "n1", "x-dup"), fin("b", 1, "n2", "y"))}
	r := Check(log, []Observed{{ID: "a", Expected: []byte("x")}, {ID: "b", Expected: []byte("y")}, {ID: "c"}})
	if r.Jobs != 3 || r.Completed != 2 || r.StaleRefused != 1 || len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "c did not complete") {
		t.Fatalf("batched history: jobs %d, completed %d, stale %d, violations %v; want 3, 2, 1 and only c not completed",
			r.Jobs, r.Completed, r.StaleRefused, r.Violations)
	}
}

// The output a cancelled job's run had written, kept on it after the
// cancel (FinishJob.ended_output), is not a result: the checker neither
// counts it as a second outcome nor as a stale result, and the other
// jobs' verdicts stay aligned with the FSM's.
func TestCheckerSkipsEndedOutput(t *testing.T) {
	cancel := &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: "a"}}}
	kept := &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: "a", Attempt: 1, NodeId: "n1", EndedOutput: true, Stdout: []byte("partial")}}}
	log := []*raftpb.Command{sub("a"), sub("b"), asg("a", 1, "n1"), asg("b", 1, "n1"), cancel, kept, fin("b", 1, "n1", "y"), fin("b", 1, "n1", "y-dup")}
	r := Check(log, []Observed{{ID: "b", Expected: []byte("y")}})
	if len(r.Violations) != 0 || r.StaleRefused != 1 || r.Completed != 1 {
		t.Fatalf("history with kept output: stale %d, completed %d, violations %v", r.StaleRefused, r.Completed, r.Violations)
	}
}

// rh is a RunHere of job id on node n with output out.
func rh(id, n, out string, mod func(*raftpb.JobRecord)) *raftpb.Command {
	rec := &raftpb.JobRecord{Id: id, Kind: "wasm", ModuleSha256: "ab"}
	if mod != nil {
		mod(rec)
	}
	return &raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{Submit: &raftpb.SubmitJob{Job: rec}, NodeId: n,
		Finish: &raftpb.FinishJob{Ok: true, Stdout: []byte(out)}}}}
}

func member(n string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: n}}}}
}

// Jobs run where they were submitted (RunHere) are accepted with their
// result in one entry; the model and the FSM agree on which runs are
// recorded and which are dropped (a repeat, a draining node, a job with a
// grant), and a dropped run's job completes once the usual way.
func TestRunHereInTheHistory(t *testing.T) {
	drain := &raftpb.Command{Cmd: &raftpb.Command_SetNodeSchedulable{SetNodeSchedulable: &raftpb.SetNodeSchedulable{Id: "n2", Eligible: true, Draining: true}}}
	log := []*raftpb.Command{member("n1"), member("n2"), drain,
		rh("a", "n1", "A", nil),
		rh("a", "n1", "A", nil),      // a resend: dropped
		fin("a", 1, "n1", "A-again"), // a worker's result for it: refused (ended)
		rh("b", "n2", "B-drained", nil), asg("b", 1, "n1"), fin("b", 1, "n1", "B"),
		rh("c", "n1", "C-granted", func(r *raftpb.JobRecord) { r.KvPrefix = "p/" }), asg("c", 1, "n1"), fin("c", 1, "n1", "C"),
		{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: []*raftpb.Command{rh("d", "n1", "D", nil), sub("e")}}}},
	}
	r := Check(log, []Observed{{ID: "a", Expected: []byte("A")}, {ID: "b", Expected: []byte("B")}, {ID: "c", Expected: []byte("C")}, {ID: "d", Expected: []byte("D")}})
	if len(r.Violations) != 0 || r.Completed != 4 {
		t.Fatalf("history with jobs run here: %+v", r)
	}
	// Recorded twice would be caught: a second RunHere of the same job
	// under another id with the same key is dropped by both.
	keyed := func(r *raftpb.JobRecord) { r.IdempotencyKey = "dev/k"; r.PayloadHash = []byte("p") }
	r = Check([]*raftpb.Command{member("n1"), rh("k1", "n1", "K", keyed), rh("k2", "n1", "K2", keyed)}, []Observed{{ID: "k1", Expected: []byte("K")}})
	if len(r.Violations) != 0 || r.Completed != 1 {
		t.Fatalf("a keyed resend run here: %+v", r)
	}
}
