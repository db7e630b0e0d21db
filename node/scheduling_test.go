package node_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/internal/history"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// getJob reads a job linearizably. A read changes nothing, so one that
// finds no leader (an election under load) is simply asked again, for a
// while; any other error, or no leader for that long, fails the test.
func getJob(t *testing.T, cl *client.Client, id string) *palyrav1.Job {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := cl.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
		if err == nil {
			return resp.Msg.Job
		}
		if e := cl.Explain(err); time.Now().After(deadline) || e.Code != "no_quorum" && e.Code != "unavailable" {
			t.Fatal(e)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// 1,000 small jobs submitted to different nodes all complete exactly once
// and are spread over the workers.
func TestThousandJobsExactlyOnce(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 150
	}
	tc := newTestCluster(t, 3)
	mod := testwasm.Build(t, "reverse")
	clients := make([]*client.Client, 3)
	for i := range clients {
		clients[i] = operator(t, tc.first, tc.addrs[i])
	}
	var mu sync.Mutex
	var accepted []history.Observed
	var wg sync.WaitGroup
	work := make(chan int, n)
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				in := fmt.Sprintf("job-%04d", i)
				cl := clients[i%3]
				// A client that retries transient failures with an
				// idempotency key, as a real one would.
				var resp *palyrav1.SubmitJobResponse
				var err error
				for try := 0; try < 20; try++ {
					resp, err = cl.Submit(callCtx(t), &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte(in), IdempotencyKey: in})
					if err == nil {
						break
					}
					if c := cl.Explain(err).Code; c != "no_quorum" && c != "unavailable" && c != "not_leader" {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				if err != nil {
					t.Error(cl.Explain(err))
					return
				}
				mu.Lock()
				accepted = append(accepted, history.Observed{ID: resp.Job.Id, Expected: []byte(reverse(in))})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(accepted) != n {
		t.Fatalf("%d of %d submissions accepted", len(accepted), n)
	}
	per := map[string]int{}
	for _, o := range accepted {
		var j *palyrav1.Job
		waitFor(t, "job "+o.ID, 2*time.Minute, func() bool { j = getJob(t, clients[0], o.ID); return j.Phase.Terminal() })
		per[j.NodeId]++
	}
	if len(per) != 3 {
		t.Fatalf("jobs ran on %d workers, want all 3: %v", len(per), per)
	}
	for id, c := range per {
		if c < n/10 {
			t.Errorf("worker %s ran only %d of %d jobs: %v", id, c, n, per)
		}
	}
	dir := tc.dirs[0]
	for i := range tc.nodes {
		tc.kill(i)
	}
	log, err := history.ReadLog(filepath.Join(dir, "raft", "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	r := history.Check(log, accepted)
	for _, v := range r.Violations {
		t.Error(v)
	}
	t.Logf("%d jobs, per worker %v, %d completed", n, per, r.Completed)
}

// Constraints, drain and cancel on a cluster.
func TestConstraintsDrainCancel(t *testing.T) {
	first := start(t, node.Config{Labels: map[string]string{"zone": "a"}})
	op := operator(t, first, first.Addr())
	n2 := join(t, op, first.Addr(), t.TempDir())
	tc := &testCluster{t: t, first: first, nodes: []*node.Node{first, n2}}
	tc.waitHealthy(2)
	ctx := callCtx(t)
	mod := testwasm.Build(t, "reverse")
	spin := testwasm.Build(t, "spin")

	// Constraint zone=a runs only on the first node.
	for i := 0; i < 6; i++ {
		resp, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("x"), Constraints: map[string]string{"zone": "a"}}))
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		if j := waitCompleted(t, op, resp.Msg.Job.Id); j.NodeId != first.ID() {
			t.Fatalf("constrained job ran on %s", j.NodeId)
		}
	}
	// No node matches: the job stays queued and says why.
	resp, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("x"), Constraints: map[string]string{"zone": "mars"}}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	waitFor(t, "a pending reason", 30*time.Second, func() bool {
		j := getJob(t, op, resp.Msg.Job.Id)
		return j.Phase == palyrav1.JobPhase_JOB_PHASE_QUEUED && strings.Contains(j.PendingReason, "zone=mars")
	})

	// Drain n2 while it runs a job: no new work goes there; the running job continues.
	// A fuel budget no run here can burn: only the cancel below stops it.
	running, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: spin, TimeoutMs: 60_000, Fuel: 1 << 62}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	var j *palyrav1.Job
	// Started on its worker, not only placed: a drain hands back a run that
	// has not started yet (its worker still fetching the module, or waiting
	// for a slot), and CI once drained in that moment.
	waitFor(t, "spin to start on its worker", 30*time.Second, func() bool {
		j = getJob(t, op, running.Msg.Job.Id)
		return j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && j.RunStartedAtMs > 0
	})
	target := j.NodeId
	if _, err := op.Node.SetSchedulable(ctx, connect.NewRequest(&palyrav1.SetSchedulableRequest{NodeId: target, Drain: true})); err != nil {
		t.Fatal(op.Explain(err))
	}
	for i := 0; i < 8; i++ {
		r, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("d")}))
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		if jj := waitCompleted(t, op, r.Msg.Job.Id); jj.NodeId == target {
			t.Fatalf("job placed on draining node %s", target)
		}
	}
	if jj := getJob(t, op, running.Msg.Job.Id); jj.Phase != palyrav1.JobPhase_JOB_PHASE_RUNNING || jj.NodeId != target {
		t.Fatalf("drain disturbed the running job: %v on %s", jj.Phase.WireName(), jj.NodeId)
	}
	// Cancel stops the running instance on its worker: the slot frees at once.
	t0 := time.Now()
	if _, err := op.Jobs.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: running.Msg.Job.Id})); err != nil {
		t.Fatal(op.Explain(err))
	}
	waitFor(t, "the worker to stop the cancelled run", 10*time.Second, func() bool {
		for _, nd := range tc.nodes {
			if nd.ID() == target {
				return nd.RunningJobs() == 0
			}
		}
		return false
	})
	t.Logf("cancelled run stopped on its worker after %s", time.Since(t0).Round(time.Millisecond))
	if _, err := op.Node.SetSchedulable(ctx, connect.NewRequest(&palyrav1.SetSchedulableRequest{NodeId: target, Eligible: true})); err != nil {
		t.Fatal(op.Explain(err))
	}
}

func TestIdempotencyKey(t *testing.T) {
	n := start(t, node.Config{})
	op := operator(t, n, n.Addr())
	ctx := callCtx(t)
	mod := testwasm.Build(t, "reverse")
	req := &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("once"), IdempotencyKey: "deploy-42"}
	a, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	b, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(req))
	if err != nil || b.Msg.Job.Id != a.Msg.Job.Id || !b.Msg.Replayed {
		t.Fatalf("replay: %v %v", b, err)
	}
	req.Input = []byte("different")
	_, err = op.Jobs.SubmitJob(ctx, connect.NewRequest(req))
	if e := op.Explain(err); err == nil || e.Code != "conflict" || !strings.Contains(e.Message, "different payload") {
		t.Fatalf("different payload: %v", err)
	}
}
