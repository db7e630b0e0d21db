package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// tagTimeout bounds how long an inbound stream may take to send its tag.
const tagTimeout = 10 * time.Second

// streamBacklog bounds streams waiting in RaftLayer's and memberlist's queues.
const streamBacklog = 64

// OpenStream opens a stream tagged tag to the peer at addr (host:port),
// dialling or re-dialling the peer connection as needed. The peer's mesh
// hands the stream to the consumer of tag (see Handle). Close the returned conn fully
// when done.
func (t *Transport) OpenStream(ctx context.Context, addr string, tag Tag) (net.Conn, error) {
	if tag == 0 {
		return nil, errors.New("mesh: OpenStream with tag 0; use one of the Tag constants")
	}
	for attempt := 0; ; attempt++ {
		c, err := t.peerConn(ctx, addr)
		if err != nil {
			return nil, err
		}
		sc, err := t.openOn(ctx, c, tag)
		if err == nil {
			return sc, nil
		}
		if c.Context().Err() == nil || attempt > 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("mesh: open %s stream to %s: %w", tag, addr, err)
		}
		t.forget(c) // the cached conn had died; dial once more
	}
}

// openOn opens a stream on c and writes its tag.
func (t *Transport) openOn(ctx context.Context, c *quic.Conn, tag Tag) (*streamConn, error) {
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		s.SetWriteDeadline(d)
	}
	if _, err := s.Write([]byte{byte(tag)}); err != nil {
		s.CancelRead(streamShutdown)
		s.CancelWrite(streamShutdown)
		return nil, err
	}
	s.SetWriteDeadline(time.Time{})
	return newStreamConn(t, c, s, tag), nil
}

// Handle makes h the handler for inbound streams tagged tag: each stream is
// passed to h in its own goroutine together with the verified peer, and is
// closed when h returns. Until Handle is called, streams of the tag are
// refused, so register before peers start sending. A second Handle replaces
// the first; Handle(tag, nil) removes the handler. Close waits for running handlers, so h must return once its
// stream fails. Mesh's own tags (raft, gossip) cannot be handled here.
func (t *Transport) Handle(tag Tag, h func(net.Conn, PeerInfo)) error {
	if tag == 0 || tag.internal() {
		return fmt.Errorf("mesh: Handle(%s): tag is 0 or served inside mesh (use RaftLayer or MemberlistTransport)", tag)
	}
	if h == nil {
		t.mu.Lock()
		delete(t.consumers, tag)
		t.mu.Unlock()
		return nil
	}
	return t.setConsumer(tag, &consumer{take: func(sc *streamConn) {
		defer sc.Close()
		p, _ := Peer(sc)
		h(sc, p)
	}})
}

// consumer takes ownership of inbound streams of one tag. take runs in a
// goroutine that Close waits for.
type consumer struct {
	take func(*streamConn)
}

// setConsumer installs c for tag, replacing any previous consumer.
func (t *Transport) setConsumer(tag Tag, c *consumer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.consumers[tag] = c
	return nil
}

// queueConsumer makes a consumer that queues streams (up to streamBacklog)
// for an Accept-style reader and refuses them when the queue is full.
func (t *Transport) queueConsumer(tag Tag) (*consumer, chan net.Conn) {
	q := make(chan net.Conn, streamBacklog)
	return &consumer{take: func(sc *streamConn) {
		select {
		case q <- sc:
		default:
			t.log.Warn("refusing stream: consumer backlog full", "tag", tag.String(), "peer", canonical(sc.RemoteAddr()))
			sc.reject(streamQueueFull)
		}
	}}, q
}

// removeConsumer uninstalls c (if still installed) and closes the streams
// left in its queue q (which may be nil).
func (t *Transport) removeConsumer(tag Tag, c *consumer, q chan net.Conn) {
	t.mu.Lock()
	if t.consumers[tag] == c {
		delete(t.consumers, tag)
	}
	t.mu.Unlock()
	if q != nil {
		drain(q)
	}
}

func drain(q chan net.Conn) {
	for {
		select {
		case c := <-q:
			c.Close()
		default:
			return
		}
	}
}

// acceptStreams reads a peer conn's inbound streams until it dies.
func (t *Transport) acceptStreams(c *quic.Conn) {
	for {
		s, err := c.AcceptStream(t.ctx)
		if err != nil {
			return
		}
		if t.faulted(c.RemoteAddr()) {
			t.faultClose(c)
			return
		}
		if !t.goTracked(func() { t.route(c, s) }) {
			s.CancelRead(streamShutdown)
			s.CancelWrite(streamShutdown)
			return
		}
	}
}

// route reads a stream's tag and hands it to the tag's consumer.
func (t *Transport) route(c *quic.Conn, s *quic.Stream) {
	var b [1]byte
	s.SetReadDeadline(time.Now().Add(tagTimeout))
	if _, err := s.Read(b[:]); err != nil {
		s.CancelRead(streamShutdown)
		s.CancelWrite(streamShutdown)
		return
	}
	s.SetReadDeadline(time.Time{})
	tag := Tag(b[0])
	sc := newStreamConn(t, c, s, tag)
	switch tag {
	case TagGossipPacket:
		t.readGossipPacket(sc)
		return
	case TagProbe: // a peer asks whether this conn is still ours: refusing says yes
		sc.reject(streamNoTag)
		return
	}
	t.mu.Lock()
	cons := t.consumers[tag]
	t.mu.Unlock()
	if cons == nil {
		t.log.Debug("refusing stream with unserved tag", "tag", tag.String(), "peer", canonical(c.RemoteAddr()))
		sc.reject(streamNoTag)
		return
	}
	cons.take(sc)
}
