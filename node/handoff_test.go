package node_test

import (
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A leader stopped cleanly (Close, which SIGTERM and SIGINT run) hands
// leadership to another voter before it stops: a survivor is asked for its
// vote by a candidate that a leadership transfer started (an election
// after the leader fell silent asks without that flag), and a write through
// a survivor right after Close is answered, not left with an unknown
// outcome.
func TestClosingLeaderHandsLeadershipOver(t *testing.T) {
	nodes, leader := threeVoters(t)
	first := nodes[0]
	var old *node.Node
	var survivors []*node.Node
	for _, n := range nodes {
		if n.ID() == leader {
			old = n
		} else {
			survivors = append(survivors, n)
		}
	}
	var transfer atomic.Bool
	for _, s := range survivors {
		obs := raft.NewObserver(nil, false, func(o *raft.Observation) bool {
			if rv, ok := o.Data.(raft.RequestVoteRequest); ok && rv.LeadershipTransfer {
				transfer.Store(true)
			}
			return false
		})
		s.RaftForTest().RegisterObserver(obs)
		t.Cleanup(func() { s.RaftForTest().DeregisterObserver(obs) })
	}

	if err := old.Close(); err != nil {
		t.Logf("closing the leader: %v", err)
	}
	cl := operator(t, first, survivors[1].Addr())
	if _, err := cl.KV.PutKV(callCtx(t), connect.NewRequest(&palyrav1.PutKVRequest{Key: "after/handoff", Value: []byte("v")})); err != nil {
		t.Fatalf("a write through %s right after the leader stopped: %v", survivors[1].ID(), cl.Explain(err))
	}
	waitFor(t, "a survivor to see a vote requested by a leadership transfer (the stopping leader handed over; without that, the survivors elect one after the election timeout)",
		30*time.Second, transfer.Load)
	_, l := survivors[0].Cluster().Leader()
	if l == "" || l == leader {
		t.Fatalf("after the hand-off %s sees leader %q; want a survivor", survivors[0].ID(), l)
	}
}
