package mesh

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// RaftLayer returns a raft.StreamLayer over TagRaft streams: Accept yields
// inbound Raft streams (use Peer to authorise them), Dial opens one to a
// peer, Addr is the advertise address. Closing the layer stops accepting Raft
// streams but leaves the Transport running. Use one layer at a time.
func (t *Transport) RaftLayer() raft.StreamLayer {
	l := &raftLayer{t: t, closed: make(chan struct{})}
	l.cons, l.q = t.queueConsumer(TagRaft)
	if err := t.setConsumer(TagRaft, l.cons); err != nil {
		l.once.Do(func() { close(l.closed) })
	}
	return l
}

type raftLayer struct {
	t      *Transport
	cons   *consumer
	q      chan net.Conn
	closed chan struct{}
	once   sync.Once
}

var _ raft.StreamLayer = (*raftLayer)(nil)

// Accept waits for the next inbound Raft stream.
func (l *raftLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.q:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.t.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops accepting Raft streams and refuses those still queued.
func (l *raftLayer) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.t.removeConsumer(TagRaft, l.cons, l.q)
	})
	return nil
}

// Addr is this node's advertise address, which Raft publishes as its own.
func (l *raftLayer) Addr() net.Addr { return advertiseAddr(l.t.advertise) }

// Dial opens a Raft stream to address within timeout.
func (l *raftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.t.OpenStream(ctx, string(address), TagRaft)
}

// advertiseAddr is a host:port that is not necessarily resolved.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "udp" }
func (a advertiseAddr) String() string  { return string(a) }
