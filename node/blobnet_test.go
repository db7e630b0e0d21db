package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A module known to be held by this node and by another live node is not
// read, hashed or pushed again by later submissions naming it: the first
// submission replicates it, the next ones only commit.
func TestKnownModuleIsNotPushedAgain(t *testing.T) {
	first, second, _ := twoNodes(t)
	nodes := []*node.Node{first, second}
	// A Go guest would cost a cold compile per node, which proves nothing more.
	mod := emptyModule
	sub := func(cl *client.Client, in string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte(in)}); err != nil {
			t.Fatal(cl.Explain(err))
		}
	}
	for i, n := range nodes {
		cl := operator(t, first, n.Addr())
		sub(cl, "first") // bytes (node 1) or by hash (node 2): replicated to the other node
		pushed := n.BlobPushes()
		if pushed == 0 {
			t.Fatalf("node %d: the first submission pushed the module nowhere", i+1)
		}
		for k := 0; k < 3; k++ {
			sub(cl, "again") // by hash
		}
		if got := n.BlobPushes(); got != pushed {
			t.Fatalf("node %d: %d more pushes for 3 by-hash submissions of a module both nodes hold, want none", i+1, got-pushed)
		}
	}
}
