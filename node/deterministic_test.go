package node_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// The same module and input, as 20 deterministic jobs submitted through
// three nodes while other jobs load the cluster, give identical output,
// stderr and fuel_used wherever they ran.
func TestDeterministicJobsAcrossNodesUnderLoad(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	n2 := join(t, op, first.Addr(), t.TempDir())
	n3 := join(t, op, first.Addr(), t.TempDir())
	tc := &testCluster{t: t, first: first, nodes: []*node.Node{first, n2, n3}}
	tc.waitHealthy(3)
	via := []*client.Client{op, operator(t, first, n2.Addr()), operator(t, first, n3.Addr())}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mod := testwasm.Build(t, "clockrand")
	load := testwasm.Build(t, "reverse")

	stop := make(chan struct{})
	var loadWG sync.WaitGroup
	for i := range 4 {
		loadWG.Add(1)
		go func() {
			defer loadWG.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				via[i%3].Run(ctx, &palyrav1.SubmitJobRequest{WasmModule: load, Input: []byte("load")}, nil)
			}
		}()
	}
	jobs := make([]*palyrav1.Job, 20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := via[i%3].Run(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("1s"), Deterministic: true, TimeoutMs: 60_000}, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = op.Explain(err)
			}
			jobs[i] = j
		}()
	}
	wg.Wait()
	close(stop)
	loadWG.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	nodes := map[string]bool{}
	for i, j := range jobs {
		if j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED || !j.Deterministic {
			t.Fatalf("job %d: %s deterministic=%v %v", i, j.Phase.WireName(), j.Deterministic, j.Error)
		}
		nodes[j.NodeId] = true
		if string(j.Stdout) != string(jobs[0].Stdout) || string(j.Stderr) != string(jobs[0].Stderr) || j.FuelUsed != jobs[0].FuelUsed {
			t.Fatalf("job %d (on %s) differs from job 0 (on %s):\n%s%s fuel %d\nvs\n%s%s fuel %d", i, j.NodeId, jobs[0].NodeId,
				j.Stdout, j.Stderr, j.FuelUsed, jobs[0].Stdout, jobs[0].Stderr, jobs[0].FuelUsed)
		}
	}
	t.Logf("20 identical results (fuel %d) from %d nodes", jobs[0].FuelUsed, len(nodes))
	if len(nodes) < 2 {
		t.Errorf("every job ran on one node; the test means to compare nodes")
	}
}
