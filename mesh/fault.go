package mesh

import (
	"errors"
	"net"

	"github.com/quic-go/quic-go"
)

// FaultFunc decides, for a peer's UDP address in canonical ip:port form
// (e.g. "127.0.0.1:7444"), whether this transport is cut off from it.
type FaultFunc func(remote string) bool

// ErrPartitioned is returned for dials and stream I/O cut off by SetFault.
var ErrPartitioned = errors.New("mesh: peer unreachable (fault injected)")

// SetFault installs a test hook; nil heals. While f(remote) is true, this
// transport drops datagrams to and from remote, refuses its handshakes and
// new streams, and closes existing connections with it (so their streams
// fail). Cutting one side is enough to cut both directions. f is consulted
// on each event; call SetFault again after changing what f answers so that
// idle existing connections are swept too. f must be fast and safe for
// concurrent use.
func (t *Transport) SetFault(f FaultFunc) {
	if f == nil {
		t.fault.Store(nil)
		return
	}
	t.fault.Store(&f)
	t.mu.Lock()
	conns := make([]*quic.Conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		if f(canonical(c.RemoteAddr())) {
			t.faultClose(c)
		}
	}
}

func (t *Transport) faulted(a net.Addr) bool {
	f := t.fault.Load()
	return f != nil && (*f)(canonical(a))
}

func (t *Transport) faultedKey(key string) bool {
	f := t.fault.Load()
	return f != nil && (*f)(key)
}

func (t *Transport) faultClose(c *quic.Conn) {
	c.CloseWithError(codeFault, "partitioned by fault injection")
}
