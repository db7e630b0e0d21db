package mesh

import (
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// PeerInfo describes the authenticated peer at the other end of a stream.
type PeerInfo struct {
	// Addr is the peer's UDP address as seen on the connection.
	Addr net.Addr
	// TLS is the verified handshake state; TLS.PeerCertificates[0] is the
	// peer's leaf certificate, checked by the caller's tls.Config.
	TLS tls.ConnectionState
	// Tag is the stream's tag.
	Tag Tag
}

// Peer returns who is at the other end of a stream that mesh returned
// (from OpenStream, RaftLayer or MemberlistTransport; Handle passes it), so upper
// layers can authorise it. ok is false for any other net.Conn.
func Peer(c net.Conn) (PeerInfo, bool) {
	sc, ok := c.(*streamConn)
	if !ok {
		return PeerInfo{}, false
	}
	return PeerInfo{Addr: sc.c.RemoteAddr(), TLS: sc.c.ConnectionState().TLS, Tag: sc.tag}, true
}

// streamConn is a QUIC stream dressed as a net.Conn.
type streamConn struct {
	t    *Transport
	c    *quic.Conn
	s    *quic.Stream
	tag  Tag
	once sync.Once
	err  error
}

var _ net.Conn = (*streamConn)(nil)

func newStreamConn(t *Transport, c *quic.Conn, s *quic.Stream, tag Tag) *streamConn {
	return &streamConn{t: t, c: c, s: s, tag: tag}
}

// Read reads from the stream; it fails once SetFault cuts the peer off.
func (sc *streamConn) Read(p []byte) (int, error) {
	if sc.t.faulted(sc.c.RemoteAddr()) {
		sc.t.faultClose(sc.c)
		return 0, ErrPartitioned
	}
	return sc.s.Read(p)
}

// Write writes to the stream; it fails once SetFault cuts the peer off.
func (sc *streamConn) Write(p []byte) (int, error) {
	if sc.t.faulted(sc.c.RemoteAddr()) {
		sc.t.faultClose(sc.c)
		return 0, ErrPartitioned
	}
	return sc.s.Write(p)
}

// Close closes both directions: data already written is still delivered,
// and the peer's further writes fail.
func (sc *streamConn) Close() error {
	sc.once.Do(func() {
		sc.s.CancelRead(streamDone)
		sc.err = sc.s.Close()
	})
	return sc.err
}

// reject resets both directions with code, for streams mesh refuses.
func (sc *streamConn) reject(code quic.StreamErrorCode) {
	sc.once.Do(func() {
		sc.s.CancelRead(code)
		sc.s.CancelWrite(code)
	})
}

func (sc *streamConn) LocalAddr() net.Addr                { return sc.c.LocalAddr() }
func (sc *streamConn) RemoteAddr() net.Addr               { return sc.c.RemoteAddr() }
func (sc *streamConn) SetDeadline(t time.Time) error      { return sc.s.SetDeadline(t) }
func (sc *streamConn) SetReadDeadline(t time.Time) error  { return sc.s.SetReadDeadline(t) }
func (sc *streamConn) SetWriteDeadline(t time.Time) error { return sc.s.SetWriteDeadline(t) }
