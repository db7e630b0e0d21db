package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/history"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A 10,000-task array on three node processes, one worker SIGKILLed while
// it runs tasks: every task completes exactly once with its own output,
// and the history checker, run on the leader's committed log, finds no
// task lost, none completed twice and no stale result recorded.
func TestArrayWithWorkerSIGKILLExactlyOnce(t *testing.T) {
	t.Parallel()
	const n = 10_000
	c := newLoopbackCluster(t, 3)
	c.form()
	views := c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))
	leader := c.byID(leaderOf(views))
	victim := c.follower(leader)
	cred, err := identity.LoadCredential(node.Layout{Dir: c.members[0].dataDir}.OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(leader.addr, cred)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mod, err := os.ReadFile(testwasm.Path(t, "reverse"))
	if err != nil {
		t.Fatal(err)
	}
	inputs := make([][]byte, n)
	for i := range inputs {
		inputs[i] = []byte(fmt.Sprintf("task-%05d", i))
	}
	ctx := context.Background()
	resp, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Inputs: inputs})
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	id := resp.Array.GetId()

	// Kill the victim while it runs tasks, part-way through the array.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := cl.Jobs.ListJobs(ctx, connect.NewRequest(&palyrav1.ListJobsRequest{Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, NodeId: victim.id, Limit: 1}))
		if err == nil && len(l.Msg.Jobs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no task ran on %s (%s)", victim.name, victim.id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	g, err := cl.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if g.Msg.Array.GetDone() {
		t.Fatal("the array ended before the worker could be killed: the test proves nothing")
	}
	victim.kill()
	t.Logf("killed %s with tasks running; counts then %v", victim.name, g.Msg.Array.GetCounts())

	var done *palyrav1.JobArray
	waitUntil(t, "every task to end", 5*time.Minute, func() error {
		g, err := cl.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
		if err != nil {
			return cl.Explain(err)
		}
		done = g.Msg.Array
		if !done.GetDone() {
			return fmt.Errorf("counts %v", done.GetCounts())
		}
		return nil
	})
	if c := done.GetCounts()["completed"]; c != n {
		t.Fatalf("%d of %d tasks completed: %v", c, n, done.GetCounts())
	}
	var observed []history.Observed
	seen := 0
	err = cl.ArrayTasks(ctx, id, false, func(j *palyrav1.Job) error {
		want := reverseString(fmt.Sprintf("task-%05d", j.ArrayIndex))
		if string(j.Stdout) != want {
			return fmt.Errorf("task %d output %q, want %q", j.ArrayIndex, j.Stdout, want)
		}
		observed = append(observed, history.Observed{ID: j.Id, Expected: []byte(want)})
		seen++
		return nil
	})
	if err != nil || seen != n {
		t.Fatalf("results: %d seen, %v", seen, err)
	}

	dir := leader.dataDir
	for _, m := range c.members {
		m.kill()
	}
	log, err := history.ReadLog(filepath.Join(node.Layout{Dir: dir}.RaftDir(), "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	r := history.Check(log, observed)
	t.Logf("history: %d tasks, %d completed, %d requeued, %d stale results refused", r.Jobs, r.Completed, r.Requeues, r.StaleRefused)
	for _, v := range r.Violations {
		t.Error(v)
	}
	if r.Requeues == 0 {
		t.Error("no task was requeued: the kill hit no running task")
	}
}
