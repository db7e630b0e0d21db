package mesh_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
)

// receivedPacket waits for a gossip packet with body want on ch.
func receivedPacket(ch <-chan *memberlist.Packet, want []byte, within time.Duration) bool {
	deadline := time.After(within)
	for {
		select {
		case p := <-ch:
			if bytes.Equal(p.Buf, want) {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func TestSetFaultPartitionsAndHeals(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	a, b, c := newNode(t, ca, "node-a"), newNode(t, ca, "node-b"), newNode(t, ca, "node-c")
	for _, n := range []*mesh.Transport{a, b, c} {
		serveEcho(t, n, mesh.TagRPC)
	}
	gossipA, gossipB := a.MemberlistTransport(), b.MemberlistTransport()
	defer gossipA.Shutdown()
	defer gossipB.Shutdown()

	if !streamWorks(t, a, addrOf(b)) || !streamWorks(t, b, addrOf(a)) {
		t.Fatal("a and b cannot talk before the fault")
	}
	gossipB.WriteTo([]byte("before"), addrOf(a))
	if !receivedPacket(gossipA.PacketCh(), []byte("before"), 5*time.Second) {
		t.Fatal("gossip packet b→a lost before the fault")
	}
	long, err := a.OpenStream(ctxTimeout(t, 5*time.Second), addrOf(b), mesh.TagRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	if _, err := roundTrip(long, []byte("1")); err != nil {
		t.Fatalf("long-lived stream: %v", err)
	}

	bAddr := addrOf(b)
	a.SetFault(func(remote string) bool { return remote == bAddr })

	if _, err := roundTrip(long, []byte("2")); err == nil {
		t.Error("an existing stream across the partition still works")
	}
	if streamWorks(t, a, addrOf(b)) {
		t.Error("a opened a stream to b across the partition")
	}
	if streamWorks(t, b, addrOf(a)) {
		t.Error("b opened a stream to a across the partition (one side's fault must cut both ways)")
	}
	if !streamWorks(t, a, addrOf(c)) || !streamWorks(t, c, addrOf(a)) || !streamWorks(t, b, addrOf(c)) {
		t.Error("the fault cut more than the a–b link")
	}
	// Only the faulted side's sends are certain to be lost: b may still be
	// dialling a when the partition heals, and then its packet arrives late.
	gossipA.WriteTo([]byte("during"), addrOf(b))

	a.SetFault(nil)
	eventually(t, 10*time.Second, "a and b talking again after heal", func() bool {
		return streamWorks(t, a, addrOf(b)) && streamWorks(t, b, addrOf(a))
	})
	gossipB.WriteTo([]byte("after"), addrOf(a))
	deadline := time.After(5 * time.Second)
	for got := false; !got; {
		select {
		case p := <-gossipA.PacketCh():
			got = string(p.Buf) == "after"
		case <-deadline:
			t.Fatal("gossip packet b→a lost after heal")
		}
	}
	gossipA.WriteTo([]byte("after"), addrOf(b))
	deadline = time.After(5 * time.Second)
	for got := false; !got; {
		select {
		case p := <-gossipB.PacketCh():
			switch string(p.Buf) {
			case "during":
				t.Fatal("a gossip packet a→b sent during the partition was delivered")
			case "after":
				got = true
			}
		case <-deadline:
			t.Fatal("gossip packet a→b lost after heal")
		}
	}
}
