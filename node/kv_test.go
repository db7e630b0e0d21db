package node_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// An operator's key-value writes through a follower are forwarded to the
// leader and applied (the forwarding rules and the worker.report check
// are for jobs' writes only): put and delete through the follower, read
// through the leader.
func TestKVWritesThroughAFollower(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	n2 := joinWith(t, op, first.Addr(), node.Config{})
	tc := &testCluster{t: t, first: first, nodes: []*node.Node{first, n2}}
	tc.waitHealthy(2)
	follower := n2
	if _, leader := n2.Cluster().Leader(); leader == n2.ID() {
		follower = first
	}
	viaFollower := operator(t, first, follower.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := viaFollower.KV.PutKV(ctx, connect.NewRequest(&palyrav1.PutKVRequest{Key: "app/x", Value: []byte("1")})); err != nil {
		t.Fatalf("put through a follower: %v", viaFollower.Explain(err))
	}
	got, err := op.KV.GetKV(ctx, connect.NewRequest(&palyrav1.GetKVRequest{Key: "app/x"}))
	if err != nil || string(got.Msg.Entry.Value) != "1" {
		t.Fatalf("read through the leader: %v %v", got, err)
	}
	del, err := viaFollower.KV.DeleteKV(ctx, connect.NewRequest(&palyrav1.DeleteKVRequest{Key: "app/x"}))
	if err != nil || !del.Msg.Existed {
		t.Fatalf("delete through a follower: %v %v", del, err)
	}
}
