package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/quic-go/quic-go"
)

// peerEntry is the cached outgoing connection to one peer address. While a
// dial is under way, done is open and conn nil; callers wait on done.
type peerEntry struct {
	done chan struct{}
	conn *quic.Conn // set before done closes (or when an accepted conn is installed)
	err  error      // set before done closes when the dial failed
}

// canonical renders a UDP address as ip:port with IPv4-mapped IPv6 unmapped,
// so an address is spelled the same whether dialled or seen on an inbound
// connection. Fault functions and the peer cache use this form.
func canonical(a net.Addr) string {
	if ua, ok := a.(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return a.String()
}

// resolve turns host:port into a UDP address, honouring ctx for DNS.
func resolve(ctx context.Context, addr string) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("mesh: peer address %q is not host:port: %w", addr, err)
	}
	p, err := net.DefaultResolver.LookupPort(ctx, "udp", port)
	if err != nil {
		return nil, fmt.Errorf("mesh: peer address %q: bad port: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip.Unmap(), uint16(p))), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return nil, fmt.Errorf("mesh: resolve peer %q: %w", addr, errors.Join(err, errNoAddress))
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ips[0].Unmap(), uint16(p))), nil
}

var errNoAddress = errors.New("no address found")

// peerConn returns a live ALPNPeer connection to addr: the cached one, or a
// new dial shared by all concurrent callers.
func (t *Transport) peerConn(ctx context.Context, addr string) (*quic.Conn, error) {
	ua, err := resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	key := canonical(ua)
	for attempt := 0; ; attempt++ {
		if t.faultedKey(key) {
			return nil, fmt.Errorf("mesh: dial %s: %w", key, ErrPartitioned)
		}
		e, err := t.peerEntryFor(ua, key)
		if err != nil {
			return nil, err
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("mesh: dial %s: %w", key, ctx.Err())
		}
		if e.err != nil {
			return nil, e.err
		}
		if e.conn.Context().Err() == nil {
			return e.conn, nil
		}
		t.forget(e.conn) // died before its watcher ran; dial again
		if attempt > 0 {
			return nil, fmt.Errorf("mesh: connection to %s closed during setup: %w", key, context.Cause(e.conn.Context()))
		}
	}
}

// peerEntryFor returns the cache entry for key, starting a dial if none.
func (t *Transport) peerEntryFor(ua *net.UDPAddr, key string) (*peerEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if e := t.peers[key]; e != nil {
		return e, nil
	}
	e := &peerEntry{done: make(chan struct{})}
	t.peers[key] = e
	t.wg.Add(1)
	go t.dial(ua, key, e)
	return e, nil
}

// dial connects to a peer for entry e. It runs detached from any caller's
// context (bounded by the QUIC handshake timeout and Close), so one caller
// giving up does not fail the others waiting on the same dial.
func (t *Transport) dial(ua *net.UDPAddr, key string, e *peerEntry) {
	defer t.wg.Done()
	c, err := t.qt.Dial(t.ctx, ua, t.peerTLS, t.qconf)
	if err == nil && t.faulted(c.RemoteAddr()) { // cut off while dialling
		t.faultClose(c)
		err = ErrPartitioned
	}
	if err == nil && !t.adoptPeerEntry(c, key, e) {
		err = ErrClosed
	}
	if err != nil {
		t.mu.Lock()
		if t.peers[key] == e {
			delete(t.peers, key)
		}
		e.err = fmt.Errorf("mesh: dial peer %s: %w", key, err)
		t.mu.Unlock()
		t.refused.note(key, err)
		t.log.Debug("peer dial failed", "peer", key, "err", err)
	} else {
		t.refused.note(key, nil) // it accepts us now: an earlier refusal is over
	}
	close(e.done)
}

// adoptPeerEntry tracks a dialled conn, stores it in e and starts serving it.
func (t *Transport) adoptPeerEntry(c *quic.Conn, key string, e *peerEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.CloseWithError(codeClosed, "shutting down")
		return false
	}
	e.conn = c
	t.trackLocked(c, key)
	t.servePeerLocked(c)
	return true
}

// adoptPeer tracks an accepted peer conn and makes it the cached conn for its
// remote address: replies then flow over the connection the peer opened, and
// a restarted peer's fresh connection replaces a stale one.
func (t *Transport) adoptPeer(c *quic.Conn) {
	if t.faulted(c.RemoteAddr()) {
		c.CloseWithError(codeFault, "partitioned by fault injection")
		return
	}
	key := canonical(c.RemoteAddr())
	done := make(chan struct{})
	close(done)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.CloseWithError(codeClosed, "shutting down")
		return
	}
	if old := t.peers[key]; old == nil || isDone(old.done) {
		t.peers[key] = &peerEntry{done: done, conn: c}
	}
	t.supersedeLocked(c, key)
	t.trackLocked(c, key)
	t.servePeerLocked(c)
}

// supersedeLocked probes the older conns to key when the peer there has
// just connected anew (c), and closes those it no longer answers on: it
// restarted. Calls in flight on such a conn (a raft heartbeat) waited,
// unanswered, for their own timeout (10 s) before, since a dead conn is
// probed only at backed-off intervals, and a restarted node heard from
// the leader 3 to 6 s after it started, calling elections meanwhile. The
// probe's packet reaches the restarted process, which resets the old
// conn at once (stateless reset); a live peer refuses the probe stream,
// so a conn it still uses (two nodes may hold two conns, one each way,
// when one dials an address the other's packets do not come from) is
// kept. A conn younger than the handshake timeout is not probed: both
// ends dialling each other at once is not a restart. t.mu must be held.
func (t *Transport) supersedeLocked(c *quic.Conn, key string) {
	for x, k := range t.conns {
		if k != key || x == c || time.Since(t.born[x]) <= t.qconf.HandshakeIdleTimeout {
			continue
		}
		t.wg.Add(1)
		go func(x *quic.Conn) { // not under t.mu: the probe waits
			defer t.wg.Done()
			if !t.answers(x, probeWait) {
				t.log.Debug("peer connected anew and no longer answers on an older connection: closing it", "peer", key)
				x.CloseWithError(codeSuperseded, "superseded: the peer connected anew and no longer answers here")
			}
		}(x)
	}
}

// probeWait bounds how long a live peer may take to refuse a probe.
const probeWait = 2 * time.Second

// answers reports whether the peer still answers on c. It opens a
// TagProbe stream and closes it at once: the FIN goes out even when the
// conn has no flow-control credit left (a peer slow to read a bulk
// transfer), and a live peer resets the stream (mesh refuses TagProbe,
// and an older mesh a stream whose tag never came). Beside it, a padded
// datagram (ignored by a live peer: not gossip) is large enough that a
// restarted process answers it with a stateless reset, ending c at once.
// It says false only on evidence: c ended, or nothing at all came back
// on c within wait; never because c is busy (no stream could be opened).
func (t *Transport) answers(c *quic.Conn, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(t.ctx, wait)
	defer cancel()
	before := c.ConnectionStats().PacketsReceived
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return c.Context().Err() == nil
	}
	s.Close() // FIN only: no data, so no flow control
	_ = c.SendDatagram(make([]byte, 128))
	s.SetReadDeadline(time.Now().Add(wait))
	_, err = s.Read(make([]byte, 1))
	s.CancelRead(streamShutdown)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// Unanswered; but any packet from the peer meanwhile (on a lossy
		// link the answer may be late) says it is alive.
		return t.ctx.Err() != nil || c.ConnectionStats().PacketsReceived > before
	}
	return c.Context().Err() == nil
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// servePeerLocked starts the stream and datagram readers of a peer conn.
// t.mu must be held and t.closed false.
func (t *Transport) servePeerLocked(c *quic.Conn) {
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		t.acceptStreams(c)
	}()
	go func() {
		defer t.wg.Done()
		t.receiveDatagrams(c)
	}()
}
