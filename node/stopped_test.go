package node_test

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A node stopped cleanly (Close, which SIGTERM and SIGINT run) is listed as
// stopped by the others; one cut off from them, as a crashed one would be,
// is listed as dead.
func TestCleanlyStoppedNodeIsListedStopped(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	second := joinWith(t, op, first.Addr(), node.Config{})
	third := joinWith(t, op, first.Addr(), node.Config{})
	waitFor(t, "3 alive voters and a leader", time.Minute, func() bool { ok, _ := healthy(first, 3, 3); return ok })

	second.Close()
	third.SetFault(func(string) bool { return true })
	first.SetFault(func(remote string) bool { return remote == third.Addr() })
	want := map[string]string{first.ID(): "alive", second.ID(): "stopped", third.ID(): "dead"}
	var last error
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(last)
		}
	})
	waitFor(t, "the stopped node listed stopped, the cut-off one dead", time.Minute, func() bool {
		resp, err := op.Node.ListNodes(callCtx(t), connect.NewRequest(&palyrav1.ListNodesRequest{}))
		if err != nil {
			last = err
			return false
		}
		got := map[string]string{}
		for _, n := range resp.Msg.Nodes {
			got[n.Id] = n.State
		}
		last = fmt.Errorf("listed %v, want %v", got, want)
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
}
