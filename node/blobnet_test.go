package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A module known to be held by this node and by another live node is not
// read, hashed or pushed again by later submissions naming it: the first
// submission replicates it, the next ones only commit.
func TestKnownModuleIsNotPushedAgain(t *testing.T) {
	first := start(t, node.Config{})
	op1 := operator(t, first, first.Addr())
	second := join(t, op1, first.Addr(), t.TempDir())
	nodes := []*node.Node{first, second}
	waitFor(t, "both nodes alive on both", time.Minute, func() bool {
		for _, n := range nodes {
			alive := 0
			for _, m := range n.Cluster().Members() {
				if m.State == cluster.StateAlive {
					alive++
				}
			}
			if alive != 2 {
				return false
			}
		}
		return true
	})
	// The smallest runnable module, (module (func (export "_start"))): a
	// Go guest would cost a cold compile per node, which proves nothing more.
	mod := []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x07\x0a\x01\x06_start\x00\x00\x0a\x04\x01\x02\x00\x0b")
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
