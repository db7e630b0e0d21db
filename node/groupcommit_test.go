package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// Real nodes advertise group commit to each other (the feature gate lets
// them batch): many submits at once through the API of one node take far
// fewer raft entries than submits, and each gets its own job.
func TestNodesGroupCommitSubmits(t *testing.T) {
	first, second, _ := twoNodes(t)
	cl := operator(t, first, second.Addr())
	mod := emptyModule
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod}); err != nil { // the module is stored once
		t.Fatal(cl.Explain(err))
	}
	const n = 100
	before := first.StateForTest().AppliedIndex() // the leader: it applied each entry before answering
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte(fmt.Sprint(i)),
				Constraints: map[string]string{"zone": "nowhere"}}) // stays queued: no results to commit
			if err != nil {
				t.Error(cl.Explain(err))
				return
			}
			ids[i] = resp.Job.Id
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Fatalf("submits answered ids %v: want one job each", ids)
		}
		seen[id] = true
	}
	if entries := first.StateForTest().AppliedIndex() - before; entries >= n/2 {
		t.Fatalf("%d concurrent submits took %d raft entries: the nodes did not group-commit", n, entries)
	}
	if batches, batched, alone := second.Cluster().GroupCommitStats(); batches == 0 || batched+alone < n || batched <= alone {
		t.Fatalf("group commit stats on the node that took the submits: %d batches of %d commands, %d alone", batches, batched, alone)
	}
}
