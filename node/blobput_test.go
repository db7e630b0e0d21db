package node_test

import (
	"bytes"
	"net"
	"testing"

	"github.com/palyra-mesh/palyra/node"
)

// A blob is accepted once one other node holds it: a second target that
// died mid-push (a leader SIGKILLed while a follower replicated a large
// submit to it) no longer holds the submit until the QUIC idle timeout
// (30 s). The push to the dead peer is still under way when Put returns,
// and the live peer holds the blob. Past a bound on such background
// pushes, a Put drops the second copy.
func TestBlobPutDoesNotWaitForADeadPeer(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	second := joinWith(t, op, first.Addr(), node.Config{})
	tc := &testCluster{t: t, first: first, nodes: []*node.Node{first, second}}
	tc.waitHealthy(2)

	// A peer that takes packets and never answers: a machine gone.
	hole, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := hole.ReadFrom(buf); err != nil {
				return
			}
		}
	}()

	data := bytes.Repeat([]byte("a blob of a large submit "), 40<<10)
	hash, inflight, _, err := first.PutBlobWithDeadPeer(data, hole.LocalAddr().String(), 1)
	if err != nil {
		t.Fatalf("put with one live and one dead peer: %v", err)
	}
	if inflight != 1 {
		t.Fatalf("%d pushes under way when Put returned; want the dead peer's (Put waited for it)", inflight)
	}
	if !second.HoldsBlob(hash) {
		t.Fatal("Put returned before the live peer held the blob")
	}

	// With no room left for background pushes (a recovered node pushing
	// every blob it holds), a Put drops the second copy instead of holding
	// its bytes (or waiting for it, which stalled submits again): the
	// live peer holds the blob.
	other := bytes.Repeat([]byte("another blob "), 40<<10)
	hash, _, dropped, err := first.PutBlobWithDeadPeer(other, hole.LocalAddr().String(), 0)
	if err != nil || dropped != 1 || !second.HoldsBlob(hash) {
		t.Fatalf("put with no background room: err %v, %d copies dropped; want the second dropped and the live peer holding it", err, dropped)
	}
}
