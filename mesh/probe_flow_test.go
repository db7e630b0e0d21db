package mesh_test

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
	"github.com/quic-go/quic-go"
)

// A live peer slow to read a bulk transfer, its older conn out of
// connection flow-control credit, still answers the probe: a probe that
// sent data sat in the send buffer, went unanswered, and the live conn
// was closed with its transfers (a review's test).
func TestProbeOfAFlowBlockedLivePeerKeepsItsConnection(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	const handshake = time.Second
	at := func(name, listen, advertise string) *mesh.Transport {
		tr, err := mesh.Listen(mesh.Config{ListenAddr: listen, AdvertiseAddr: advertise, ServerTLS: ca.ServerTLS(t, name), ClientTLS: ca.ClientTLS(t, name),
			Logger: testLogger(), QUIC: &quic.Config{HandshakeIdleTimeout: handshake}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	free, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	aPort := free.LocalAddr().(*net.UDPAddr).Port
	free.Close()
	a := at("node-a", fmt.Sprintf("0.0.0.0:%d", aPort), fmt.Sprintf("127.0.0.2:%d", aPort))
	b := at("node-b", "127.0.0.1:0", "")
	release := make(chan struct{})
	// b is live but slow to read a bulk transfer.
	if err := b.Handle(mesh.TagBlob, func(c net.Conn, _ mesh.PeerInfo) {
		<-release
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		c, err := a.OpenStream(ctxTimeout(t, 5*time.Second), addrOf(b), mesh.TagBlob)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			_, err := c.Write(make([]byte, 1<<20))
			errs <- err
		}()
	}
	time.Sleep(handshake + 300*time.Millisecond)
	serveEcho(t, a, mesh.TagRPC)
	c2, err := b.OpenStream(ctxTimeout(t, 5*time.Second), net.JoinHostPort("127.0.0.2", strconv.Itoa(aPort)), mesh.TagRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // the probe waits 2 s
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("bulk write on the older, live, busy connection: %v", err)
		}
	}
}
