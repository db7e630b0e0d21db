package cluster

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// (f) A node whose certificate comes from another CA cannot join gossip or
// raft, and cannot call peer RPC.
func TestForeignNodeCannotJoin(t *testing.T) {
	n1 := newNode(t, 3)
	n1.start(true)
	if _, err := n1.cl.WaitLeader(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	stranger := newNode(t, 3)
	stranger.cred = issue(t, otherCA, identity.KindNode)
	stranger.id = stranger.cred.Principal.ID
	stranger.start(false)

	if err := stranger.cl.Join(ctxFor(t, 2*time.Second), []string{n1.addr}); err == nil {
		t.Fatal("a node with another CA's certificate joined the cluster")
	}
	if _, err := stranger.cl.call(ctxFor(t, 2*time.Second), n1.addr, "", statsRequest()); err == nil {
		t.Fatal("a node with another CA's certificate called peer RPC")
	}
	for _, m := range n1.cl.Members() {
		if m.ID == stranger.id {
			t.Fatalf("the stranger appears in the cluster's members: %+v", m)
		}
	}
}

// Only node principals may use peer RPC, raft and gossip streams, and a
// node may only add or remove itself.
func TestOnlyNodesMayCallAndOnlyForThemselves(t *testing.T) {
	nodes := formCluster(t, 2, 3)
	n1, n2 := nodes[0], nodes[1]
	if _, err := n1.cl.WaitLeader(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, nodes)
	other := others(nodes, leader)[0]

	// A paired device (same CA, device certificate) dials the leader.
	dev := issue(t, testCA, identity.KindDevice)
	devTr, err := mesh.Listen(mesh.Config{ListenAddr: "127.0.0.1:0", Logger: logger("device"),
		ServerTLS: identity.ServerTLSConfig(dev, nil, nil), ClientTLS: identity.ClientTLSConfig(dev, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer devTr.Close()

	ctx := ctxFor(t, 10*time.Second)
	conn, err := devTr.OpenStream(ctx, leader.addr, mesh.TagRPC)
	if err != nil {
		t.Fatalf("device could not open a stream at all: %v", err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	// Refused before its request is read: the write may lose the race
	// ("canceled by remote"), the refusal must arrive either way.
	_ = writeFrame(conn, &peerpb.Request{Body: &peerpb.Request_RaftJoin{RaftJoin: &peerpb.RaftJoinRequest{Id: dev.Principal.ID, Address: devTr.AdvertiseAddr()}}})
	var resp peerpb.Response
	if err := readFrame(conn, &resp); err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	conn.Close()
	if resp.GetError().GetCode() != codePermissionDenied {
		t.Fatalf("device peer RPC: got %v, want permission_denied", &resp)
	}

	for _, tag := range []mesh.Tag{mesh.TagRaft, mesh.TagGossip} {
		if err := refusedStream(ctx, devTr, leader.addr, tag); err != nil {
			t.Fatalf("device %s stream: %v", tag, err)
		}
	}

	// A node may not join or remove anyone but itself.
	for _, req := range []*peerpb.Request{
		{Body: &peerpb.Request_RaftJoin{RaftJoin: &peerpb.RaftJoinRequest{Id: "n-0badc0de", Address: "127.0.0.1:1"}}},
		{Body: &peerpb.Request_Leave{Leave: &peerpb.LeaveRequest{Id: leader.id}}},
	} {
		resp, err := other.cl.call(ctx, leader.addr, leader.id, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetError().GetCode() != codePermissionDenied {
			t.Fatalf("%T for another node: got %v, want permission_denied", req.Body, resp)
		}
	}
	// And a call checks that the peer is the node it meant to reach.
	if _, err := n1.cl.call(ctx, n2.addr, "n-0badc0de", statsRequest()); err == nil {
		t.Fatal("a call to n2's address accepted n2 answering as another node")
	}
	if got := len(leader.cl.Members()); got != 2 {
		t.Fatalf("the cluster has %d members after the refused calls, want 2", got)
	}
}

// refusedStream opens a stream of tag and checks that the node closes it at
// once rather than serving it (a served raft or gossip stream would wait for
// the opener to speak).
func refusedStream(ctx context.Context, tr *mesh.Transport, addr string, tag mesh.Tag) error {
	c, err := tr.OpenStream(ctx, addr, tag)
	if err != nil {
		return nil // refused even earlier
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		return errors.New("the stream was kept open for a device")
	}
	return nil
}

// A node forwards only its own work: a key-value write names a job it
// runs, or is an API caller's (by set, authorised by the forwarding node,
// as every command on behalf of a caller); one naming neither is refused.
func TestMayForwardKeyValueWrites(t *testing.T) {
	n1 := identity.Principal{Kind: identity.KindNode, ID: "n1"}
	for _, c := range []struct {
		cmd *raftpb.Command
		ok  bool
	}{
		{&raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", JobId: "j", NodeId: "n1"}}}, true},
		{&raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", JobId: "j", NodeId: "n2"}}}, false},
		{&raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", By: "device:d-1"}}}, true},
		{&raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k"}}}, false},
		{&raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{Key: "k", By: "device:d-1"}}}, true},
		{&raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{Key: "k"}}}, false},
		// A job's write that also names a caller would put any actor in the journal.
		{&raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", JobId: "j", NodeId: "n1", By: "device:d-1"}}}, false},
		// A job run where it was submitted: only by that node.
		{&raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{NodeId: "n1"}}}, true},
		{&raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{NodeId: "n2"}}}, false},
	} {
		if err := mayForward(n1, c.cmd); (err == nil) != c.ok {
			t.Errorf("%v: %v, want allowed=%v", c.cmd, err, c.ok)
		}
	}
}
