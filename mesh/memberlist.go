package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/quic-go/quic-go"
)

// GossipPacketSize is the memberlist.Config.UDPBufferSize to use with
// MemberlistTransport: packets up to this size ride one QUIC datagram (QUIC
// datagrams hold ~1200 bytes at the 1280-byte minimum packet size). Larger
// packets still arrive, over a one-shot stream.
const GossipPacketSize = 1100

// maxGossipPacket bounds a packet sent over a stream (memberlist never
// builds packets larger than 64 KiB).
const maxGossipPacket = 64 << 10

// dgGossip is the first byte of a datagram carrying a gossip packet; other
// values are reserved for future datagram users and dropped.
const dgGossip byte = 1

// packetBacklog bounds received gossip packets waiting for memberlist.
const packetBacklog = 256

// asyncSends bounds gossip packets waiting for a peer connection to come up.
const asyncSends = 64

// MemberlistTransport returns a memberlist.NodeAwareTransport over this
// Transport: packets as QUIC datagrams (set memberlist.Config.UDPBufferSize
// to GossipPacketSize), push/pull as TagGossip streams. Set
// memberlist.Config.Transport to it; AdvertiseAddr/Port may stay empty (the
// Transport's advertise address is used). Its Shutdown, called by
// memberlist, detaches it; the Transport keeps running. Use one at a time.
func (t *Transport) MemberlistTransport() memberlist.NodeAwareTransport {
	g := &gossipTransport{
		t:        t,
		packetCh: make(chan *memberlist.Packet, packetBacklog),
		sends:    make(chan struct{}, asyncSends),
		down:     make(chan struct{}),
	}
	g.cons, g.streams = t.queueConsumer(TagGossip)
	if err := t.setConsumer(TagGossip, g.cons); err == nil {
		t.gossip.Store(g)
	}
	return g
}

type gossipTransport struct {
	t        *Transport
	packetCh chan *memberlist.Packet
	cons     *consumer
	streams  chan net.Conn
	sends    chan struct{} // semaphore for packets waiting on a dial
	down     chan struct{}
	once     sync.Once
}

var _ memberlist.NodeAwareTransport = (*gossipTransport)(nil)

// FinalAdvertiseAddr returns ip:port when memberlist was given an address,
// else the Transport's advertise address (resolved to an IP).
func (g *gossipTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		parsed := net.ParseIP(ip)
		if parsed == nil {
			return nil, 0, fmt.Errorf("mesh: memberlist advertise address %q is not an IP", ip)
		}
		if port == 0 {
			_, p, _ := net.SplitHostPort(g.t.advertise)
			port, _ = strconv.Atoi(p)
		}
		return parsed, port, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ua, err := resolve(ctx, g.t.advertise)
	if err != nil {
		return nil, 0, fmt.Errorf("mesh: memberlist advertise address: %w", err)
	}
	return ua.IP, ua.Port, nil
}

// WriteTo sends one gossip packet to addr without blocking on a dial: with a
// live connection it is sent at once; otherwise the dial and the send finish
// in the background. Like UDP, a packet to an unreachable peer is lost.
func (g *gossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	if isDone(g.down) {
		return now, ErrClosed
	}
	c, key := g.t.livePeerConn(addr)
	if c != nil {
		return now, g.send(c, addr, b)
	}
	if key != "" && g.t.faultedKey(key) {
		return now, nil // partition: lost now, not after a later heal
	}
	select {
	case g.sends <- struct{}{}:
	default:
		return now, nil // too many peers being dialled; drop like UDP would
	}
	buf := append([]byte(nil), b...)
	if !g.t.goTracked(func() {
		defer func() { <-g.sends }()
		ctx, cancel := context.WithTimeout(g.t.ctx, 2*g.t.qconf.HandshakeIdleTimeout)
		defer cancel()
		c, err := g.t.peerConn(ctx, addr)
		if err != nil {
			return
		}
		g.send(c, addr, buf)
	}) {
		<-g.sends
		return now, ErrClosed
	}
	return now, nil
}

// send delivers b over c as a datagram, or as a one-shot stream if too big.
func (g *gossipTransport) send(c *quic.Conn, addr string, b []byte) error {
	if g.t.faulted(c.RemoteAddr()) {
		return nil // partition: silently lost
	}
	if len(b) < 1500 { // larger never fits a datagram; try, and fall back on DatagramTooLargeError
		dg := make([]byte, 1+len(b))
		dg[0] = dgGossip
		copy(dg[1:], b)
		err := c.SendDatagram(dg)
		var tooLarge *quic.DatagramTooLargeError
		if !errors.As(err, &tooLarge) {
			return err
		}
	}
	if len(b) > maxGossipPacket {
		return fmt.Errorf("mesh: gossip packet of %d bytes exceeds %d", len(b), maxGossipPacket)
	}
	if !g.t.goTracked(func() { g.sendStream(addr, b) }) {
		return ErrClosed
	}
	return nil
}

// sendStream carries one oversized packet over a TagGossipPacket stream.
func (g *gossipTransport) sendStream(addr string, b []byte) {
	ctx, cancel := context.WithTimeout(g.t.ctx, 5*time.Second)
	defer cancel()
	sc, err := g.t.OpenStream(ctx, addr, TagGossipPacket)
	if err != nil {
		return
	}
	defer sc.Close()
	sc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	sc.Write(b)
}

// PacketCh yields received gossip packets.
func (g *gossipTransport) PacketCh() <-chan *memberlist.Packet { return g.packetCh }

// StreamCh yields inbound gossip streams.
func (g *gossipTransport) StreamCh() <-chan net.Conn { return g.streams }

// DialTimeout opens a gossip stream to addr.
func (g *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if isDone(g.down) {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return g.t.OpenStream(ctx, addr, TagGossip)
}

// WriteToAddress sends a packet to a node; the name is not needed.
func (g *gossipTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return g.WriteTo(b, a.Addr)
}

// DialAddressTimeout opens a gossip stream to a node.
func (g *gossipTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return g.DialTimeout(a.Addr, timeout)
}

// Shutdown detaches this gossip transport from the Transport.
func (g *gossipTransport) Shutdown() error {
	g.once.Do(func() {
		close(g.down)
		g.t.gossip.CompareAndSwap(g, nil)
		g.t.removeConsumer(TagGossip, g.cons, g.streams)
	})
	return nil
}

// deliver queues a packet for memberlist, dropping it when the queue is full.
func (g *gossipTransport) deliver(b []byte, from net.Addr) {
	select {
	case g.packetCh <- &memberlist.Packet{Buf: b, From: from, Timestamp: time.Now()}:
	default:
	}
}

// livePeerConn returns the cached peer conn for addr if it is up, and the
// canonical key of addr if addr is an IP literal; it never dials or does DNS.
func (t *Transport) livePeerConn(addr string) (*quic.Conn, string) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, ""
	}
	key := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.peers[key]
	if e == nil || !isDone(e.done) || e.conn == nil || e.conn.Context().Err() != nil {
		return nil, key
	}
	return e.conn, key
}

// receiveDatagrams hands a peer conn's gossip datagrams to memberlist.
func (t *Transport) receiveDatagrams(c *quic.Conn) {
	for {
		b, err := c.ReceiveDatagram(t.ctx)
		if err != nil {
			return
		}
		if len(b) < 2 || b[0] != dgGossip || t.faulted(c.RemoteAddr()) {
			continue
		}
		if g := t.gossip.Load(); g != nil {
			g.deliver(b[1:], c.RemoteAddr())
		}
	}
}

// readGossipPacket reads one oversized gossip packet from a stream.
func (t *Transport) readGossipPacket(sc *streamConn) {
	defer sc.Close()
	sc.SetReadDeadline(time.Now().Add(tagTimeout))
	b, err := io.ReadAll(io.LimitReader(sc, maxGossipPacket+1))
	if err != nil || len(b) == 0 || len(b) > maxGossipPacket {
		sc.s.CancelRead(streamBadPacket)
		return
	}
	if g := t.gossip.Load(); g != nil {
		g.deliver(b, sc.RemoteAddr())
	}
}
