package node_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/internal/history"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

type testCluster struct {
	t     *testing.T
	first *node.Node
	nodes []*node.Node
	dirs  []string
	addrs []string
}

func newTestCluster(t *testing.T, size int) *testCluster {
	first := start(t, node.Config{})
	tc := &testCluster{t: t, first: first, nodes: []*node.Node{first}, dirs: []string{first.Layout().Dir}, addrs: []string{first.Addr()}}
	op := operator(t, first, first.Addr())
	for i := 1; i < size; i++ {
		n := join(t, op, first.Addr(), t.TempDir())
		tc.nodes = append(tc.nodes, n)
		tc.dirs = append(tc.dirs, n.Layout().Dir)
		tc.addrs = append(tc.addrs, n.Addr())
	}
	tc.waitHealthy(size)
	return tc
}

func (tc *testCluster) live() []*node.Node {
	var out []*node.Node
	for _, n := range tc.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

func (tc *testCluster) waitHealthy(alive int) string {
	var leader string
	waitFor(tc.t, fmt.Sprintf("%d healthy nodes agreeing on a leader", alive), 2*time.Minute, func() bool {
		leaders := map[string]bool{}
		for _, n := range tc.live() {
			ok, l := healthy(n, alive, voterTarget(alive))
			if !ok {
				return false
			}
			leaders[l] = true
			leader = l
		}
		return len(leaders) == 1
	})
	return leader
}

func (tc *testCluster) kill(i int) {
	tc.nodes[i].Close()
	tc.nodes[i] = nil
}

func (tc *testCluster) restart(i int) {
	tc.nodes[i] = start(tc.t, node.Config{DataDir: tc.dirs[i], Listen: tc.addrs[i]})
}

// holdsALongRun reports whether node i holds a sleep job placed on it
// that has at least 400 ms of its sleep left: killed now, the node stops
// it mid-run (or before it started) and the job is queued again. A node
// merely running something may be sending the result of a run that just
// ended, which then commits and requeues nothing.
func (tc *testCluster) holdsALongRun(i int) bool {
	n := tc.nodes[i]
	for _, j := range n.StateForTest().RunningOn(n.ID()) {
		d, err := time.ParseDuration(string(j.Input))
		if err == nil && time.Since(time.UnixMilli(j.PlacedAtMS)) < d-400*time.Millisecond {
			return true
		}
	}
	return false
}

func (tc *testCluster) index(id string) int {
	for i, n := range tc.nodes {
		if n != nil && n.ID() == id {
			return i
		}
	}
	return -1
}

// The history checker, run on the committed log after worker kills, a
// leader kill and a partition under a steady job workload, finds no
// accepted job lost, none completed twice and no stale result recorded.
func TestHistoryUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault-injection history test skipped in -short mode")
	}
	tc := newTestCluster(t, 3)
	sleep := testwasm.Build(t, "sleep")
	clients := make([]*client.Client, 3)
	for i := range clients {
		clients[i] = operator(t, tc.first, tc.addrs[i])
	}

	var mu sync.Mutex
	var accepted []history.Observed
	// One job through each node first, waiting as long as it takes: a
	// node validates a module it has not seen before accepting it (a
	// compile, slow under -race on a loaded machine), and the workload
	// below gives each submission only 5 s.
	for i, cl := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		resp, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: sleep, Input: []byte("200ms"), IdempotencyKey: fmt.Sprintf("warm-up-%d", i)})
		cancel()
		if err != nil {
			t.Fatalf("warm-up submission through node %d: %v", i+1, cl.Explain(err))
		}
		accepted = append(accepted, history.Observed{ID: resp.Job.Id, Expected: []byte("slept 200ms")})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	t.Cleanup(func() { halt(); wg.Wait() }) // a failed wait below leaves no submitter running
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d := fmt.Sprintf("%dms", 200+(i%4)*200)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := clients[(w+i)%3].Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: sleep, Input: []byte(d)})
				cancel()
				if err == nil {
					mu.Lock()
					accepted = append(accepted, history.Observed{ID: resp.Job.Id, Expected: []byte("slept " + d)})
					mu.Unlock()
				}
				time.Sleep(40 * time.Millisecond)
			}
		}(w)
	}

	// Jobs submitted and awaited in one call: short, so mostly run where
	// they are submitted and accepted with their result in one entry; an
	// observation counts once its end was seen.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			j, err := clients[i%3].Run(ctx, &palyrav1.SubmitJobRequest{WasmModule: sleep, Input: []byte("1ms"), IdempotencyKey: fmt.Sprintf("run-%d", i)}, nil)
			cancel()
			if err == nil && j.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED {
				mu.Lock()
				accepted = append(accepted, history.Observed{ID: j.Id, Expected: []byte("slept 1ms")})
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// Phases follow events, not the clock, so a loaded machine changes
	// how long the test takes, not what it proves.
	nAccepted := func() int { mu.Lock(); defer mu.Unlock(); return len(accepted) }
	waitFor(t, "10 accepted submissions", 2*time.Minute, func() bool { return nAccepted() >= 10 })
	// 1. Kill a worker that is not the leader, while it runs jobs.
	leader := tc.waitHealthy(3)
	victim := (tc.index(leader) + 1) % 3
	waitFor(t, "the victim to hold a job with 400 ms left", 2*time.Minute, func() bool { return tc.holdsALongRun(victim) })
	tc.kill(victim)
	time.Sleep(5 * time.Second)
	tc.restart(victim)
	tc.waitHealthy(3)
	// 2. Kill the leader.
	leader = tc.waitHealthy(3)
	li := tc.index(leader)
	// While it holds a job too: a kill that catches no run requeues
	// nothing, and the workload guard below then refuses the run.
	waitFor(t, "the leader to hold a job with 400 ms left", 2*time.Minute, func() bool { return tc.holdsALongRun(li) })
	tc.kill(li)
	time.Sleep(4 * time.Second)
	tc.restart(li)
	tc.waitHealthy(3)
	// 3. Partition one node from the others, then heal.
	p := (tc.index(tc.waitHealthy(3)) + 2) % 3
	cut := map[string]bool{}
	for i, a := range tc.addrs {
		if i != p {
			cut[a] = true
		}
	}
	tc.nodes[p].SetFault(func(remote string) bool { return cut[remote] })
	for i, n := range tc.nodes {
		if i != p {
			n.SetFault(func(remote string) bool { return remote == tc.addrs[p] })
		}
	}
	time.Sleep(4 * time.Second)
	for _, n := range tc.nodes {
		n.SetFault(nil)
	}
	tc.waitHealthy(3)
	waitFor(t, "20 accepted submissions", 2*time.Minute, func() bool { return nAccepted() >= 20 })
	halt()
	wg.Wait()

	// Every accepted job ends; then stop the nodes and check the log.
	cl := clients[tc.index(tc.waitHealthy(3))]
	for _, o := range accepted {
		waitFor(t, "job "+o.ID+" to end", 2*time.Minute, func() bool {
			resp, err := cl.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: o.ID}))
			return err == nil && resp.Msg.Job.Phase.Terminal()
		})
	}
	leaderDir := tc.dirs[tc.index(tc.waitHealthy(3))]
	for i := range tc.nodes {
		tc.kill(i)
	}
	log, err := history.ReadLog(filepath.Join(leaderDir, "raft", "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	r := history.Check(log, accepted)
	t.Logf("history: %d accepted, %d jobs in log, %d completed, %d requeued, %d stale results refused",
		len(accepted), r.Jobs, r.Completed, r.Requeues, r.StaleRefused)
	for _, v := range r.Violations {
		t.Error(v)
	}
	ranHere := 0
	for _, c := range log {
		for _, sub := range append([]*raftpb.Command{c}, c.GetBatch().GetCommands()...) {
			if sub.GetRunHere() != nil {
				ranHere++
			}
		}
	}
	if len(accepted) < 20 || r.Requeues == 0 || ranHere == 0 {
		t.Fatalf("workload too small to mean anything: %d accepted, %d requeued, %d run where submitted", len(accepted), r.Requeues, ranHere)
	}
}

// voterTarget is how many voters a cluster of n live nodes keeps (target 3,
// never an even count).
func voterTarget(n int) int {
	v := min(3, n)
	if v%2 == 0 {
		v--
	}
	return v
}
