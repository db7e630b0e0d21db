package mesh

import (
	"crypto/tls"

	"github.com/quic-go/quic-go"
)

// codeRefused closes connections whose peer is no longer trusted.
const codeRefused quic.ApplicationErrorCode = 0x105

// DropPeers closes every live connection (API and peer) whose verified
// peer certificate makes refuse return true, and returns how many it
// closed. Handshakes check trust only when a connection starts; a caller
// that revokes a principal uses this to cut the connections it already
// has, so the revoked peer must handshake again (and is refused).
func (t *Transport) DropPeers(refuse func(tls.ConnectionState) bool) int {
	t.mu.Lock()
	var drop []*quic.Conn
	for c := range t.conns {
		if refuse(c.ConnectionState().TLS) {
			drop = append(drop, c)
		}
	}
	t.mu.Unlock()
	for _, c := range drop {
		c.CloseWithError(codeRefused, "peer no longer trusted")
	}
	return len(drop)
}
