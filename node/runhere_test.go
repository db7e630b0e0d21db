package node_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A short job submitted and awaited in one call runs on the node that
// took the call, at once, and is accepted with its result in one entry,
// through a follower as through the leader; a node that takes no new work
// and a job with grants go through the scheduler instead, and every one
// of them completes.
func TestShortJobsRunWhereTheyAreSubmitted(t *testing.T) {
	first, second, op := twoNodes(t)
	viaSecond := operator(t, first, second.Addr())
	mod := testwasm.Build(t, "reverse")
	runOn := func(name string, n *node.Node, req *palyrav1.SubmitJobRequest) *palyrav1.Job {
		t.Helper()
		cl := op
		if n == second {
			cl = viaSecond
		}
		j, err := cl.Run(callCtx(t), req, nil)
		if err != nil || j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED || string(j.Stdout) != "cba" {
			t.Fatalf("%s: %v %v", name, j, err)
		}
		return j
	}
	plain := func() *palyrav1.SubmitJobRequest {
		return &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("abc")}
	}

	for _, n := range []*node.Node{second, first} {
		before, _ := n.RunHereForTest()
		j := runOn("a job through "+n.ID(), n, plain())
		if after, _ := n.RunHereForTest(); after != before+1 || j.NodeId != n.ID() || j.Attempt != 1 || j.PlacedAtMs == 0 || j.FinishedAtMs < j.PlacedAtMs {
			t.Fatalf("through %s: run here %v → %v, job %+v; want it run there, attempt 1", n.ID(), before, after, j)
		}
		// The job reads back the same from the other node.
		got, err := op.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: j.Id}))
		if err != nil || got.Msg.Job.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED || got.Msg.Job.NodeId != n.ID() {
			t.Fatalf("job get %s: %v %v", j.Id, got, err)
		}
	}

	// A job with a grant is never run before it is accepted.
	before, _ := second.RunHereForTest()
	kv := plain()
	kv.KvPrefix = "here/"
	runOn("a job with a key-value grant", second, kv)
	if after, _ := second.RunHereForTest(); after != before {
		t.Fatalf("a job with a grant was run where it was submitted (%v → %v)", before, after)
	}

	// A node made ineligible takes no new work, run here or placed.
	if _, err := op.Node.SetSchedulable(callCtx(t), connect.NewRequest(&palyrav1.SetSchedulableRequest{NodeId: second.ID(), Eligible: false})); err != nil {
		t.Fatal(op.Explain(err))
	}
	waitFor(t, "the second node ineligible on its replica", 30*time.Second, func() bool {
		m, ok := second.StateForTest().Member("node", second.ID())
		return ok && m.Ineligible
	})
	j := runOn("a job through an ineligible node", second, plain())
	if after, _ := second.RunHereForTest(); after != before || j.NodeId != first.ID() {
		t.Fatalf("through an ineligible node: run here %v → %v, ran on %s", before, after, j.NodeId)
	}
}

// A node that announced its clean stop gets no new work from the others'
// schedulers, whatever slots its meta still offers: a stopping leader
// announces its stop, hands leadership over and only then withdraws its
// slots, and the new leader placed the jobs it handed back on it again (a
// user trial, 1 SIGTERM of the leader in 5).
func TestStoppingNodeIsOfferedNoWork(t *testing.T) {
	first, second, _ := twoNodes(t)
	waitFor(t, "the second node's slots seen by the first", 30*time.Second, func() bool { return first.OfferedSlotsForTest(second.ID()) > 0 })
	if err := second.Cluster().Stopping(callCtx(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stopping node counted with no slots", 30*time.Second, func() bool { return first.OfferedSlotsForTest(second.ID()) == 0 })
	for _, m := range first.Cluster().Members() {
		if m.ID == second.ID() && (m.Capacity["wasm"] == 0 || !m.Departing) {
			t.Fatalf("the stopping node's member entry: capacity %v departing %v; want its slots still offered, and departing", m.Capacity, m.Departing)
		}
	}
}

// A job run where it was submitted that failed and is queued for a retry
// is answered whole: the caller's first message has the failed attempt
// (its node, its end), not only the job's id and phase.
func TestRunHereRetryIsAnsweredWhole(t *testing.T) {
	n := start(t, node.Config{})
	cl := operator(t, n, n.Addr())
	mod := testwasm.Build(t, "fail")
	warm := &palyrav1.SubmitJobRequest{WasmModule: mod}
	if j, err := cl.Run(callCtx(t), warm, nil); err != nil || j.Phase != palyrav1.JobPhase_JOB_PHASE_FAILED {
		t.Fatalf("warm-up: %v %v", j, err) // the module is compiled here from now on
	}
	before, _ := n.RunHereForTest()
	var first *palyrav1.Job
	j, err := cl.Run(callCtx(t), &palyrav1.SubmitJobRequest{WasmModule: mod, Retries: 1}, func(j *palyrav1.Job) {
		if first == nil {
			first = j
		}
	})
	if err != nil || j.Phase != palyrav1.JobPhase_JOB_PHASE_FAILED || j.Attempt != 2 {
		t.Fatalf("a job failing twice: %v %v", j, err)
	}
	if after, _ := n.RunHereForTest(); after != before+1 {
		t.Fatalf("run here %v → %v: the first attempt was not run where it was submitted", before, after)
	}
	if first == nil || first.Attempt != 1 || len(first.GetEarlierAttempts()) != 1 || first.GetEarlierAttempts()[0].NodeId != n.ID() {
		t.Fatalf("first message %+v: want the job queued again after attempt 1 on %s", first, n.ID())
	}
}
