package api

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A node revoked by 'palyra node remove' is "removed" in 'palyra nodes'
// and in 'palyra ca status' alike, and its last gossiped CA key is not
// counted as a holder that can sign.
func TestRemovedNodeStateInNodesAndCAStatus(t *testing.T) {
	s, ctl, ctx := newOperatorServer(t)
	for _, cmd := range []*raftpb.Command{
		{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n-live", AddedAtMs: 1, AddedBy: "init"}}}},
		{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n-gone", AddedAtMs: 1, AddedBy: "init"}}}},
		{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n-down", AddedAtMs: 1, AddedBy: "init"}}}},
		{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{Kind: "node", Id: "n-gone", AtMs: 2, By: "operator"}}},
	} {
		if _, err := ctl.Apply(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
	}
	s.Members = func() []cluster.Member {
		return []cluster.Member{
			{ID: "n-live", State: cluster.StateAlive, Voter: true, Labels: map[string]string{LabelCAKeys: "aaaaaaaaaaaa"}},
			{ID: "n-gone", State: cluster.StateDead, Voter: false, Labels: map[string]string{LabelCAKeys: "aaaaaaaaaaaa,bbbbbbbbbbbb"}},
			{ID: "n-down", State: cluster.StateDead, Voter: true},
		}
	}
	want := map[string]string{"n-live": cluster.StateAlive, "n-gone": StateRemoved, "n-down": cluster.StateDead}
	nodes, err := nodeService{s}.ListNodes(ctx, connect.NewRequest(&palyrav1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Msg.Nodes {
		if n.State != want[n.Id] {
			t.Errorf("palyra nodes: %s is %q, want %q", n.Id, n.State, want[n.Id])
		}
	}
	_, caNodes := s.caView()
	for _, n := range caNodes {
		if n.State != want[n.Id] {
			t.Errorf("ca status: %s is %q, want %q", n.Id, n.State, want[n.Id])
		}
	}
	_, holders := s.caNodes()
	if got := holders["aaaaaaaaaaaa"]; len(got) != 1 || got[0] != "n-live" {
		t.Errorf("holders of aaaa: %v, want only n-live", got)
	}
	if got, ok := holders["bbbbbbbbbbbb"]; ok {
		t.Errorf("the key only the removed node held counts holders %v, want none", got)
	}
}
