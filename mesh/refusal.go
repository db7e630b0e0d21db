package mesh

import (
	"context"
	"errors"
	"sync"

	"github.com/quic-go/quic-go"
)

// TLS alerts by which a peer says it does not accept this end's
// certificate (RFC 8446 §6.2).
const (
	alertBadCertificate      = 42
	alertCertificateRevoked  = 44
	alertCertificateRequired = 116
)

// CertRefused reports whether err is a peer refusing this end's
// certificate: a TLS alert bad_certificate, certificate_revoked or
// certificate_required that the peer sent. A timeout or an unreachable
// peer is not a refusal.
func CertRefused(err error) bool {
	var te *quic.TransportError
	if !errors.As(err, &te) || !te.Remote || !te.ErrorCode.IsCryptoError() {
		return false
	}
	switch uint8(te.ErrorCode) {
	case alertBadCertificate, alertCertificateRevoked, alertCertificateRequired:
		return true
	}
	return false
}

// PeerCertRefused reports whether err is this end refusing the peer's
// certificate in the handshake (the alert bad_certificate it sent when its
// check of the peer's chain failed: another cluster's CA, a root this end
// no longer or not yet trusts, an expired or revoked certificate).
func PeerCertRefused(err error) bool {
	var te *quic.TransportError
	return errors.As(err, &te) && !te.Remote && te.ErrorCode.IsCryptoError() && uint8(te.ErrorCode) == alertBadCertificate
}

// Why a peer connection last ended, as far as certificates go.
const (
	endedOther     = iota
	endedRefusedUs // the peer refused this end's certificate
	endedRefusedIt // this end refused the peer's certificate
)

// refusals remembers, per peer address, whether the last peer connection
// ended with a certificate refused, and whose.
type refusals struct {
	mu   sync.Mutex
	last map[string]int
}

func (r *refusals) note(key string, err error) {
	if key == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]int{}
	}
	switch {
	case CertRefused(err):
		r.last[key] = endedRefusedUs
	case PeerCertRefused(err):
		r.last[key] = endedRefusedIt
	default:
		r.last[key] = endedOther
	}
}

// count counts the peers whose last connection ended for why, and the
// peers tried: those whose last connection ended at all, and those with
// a live connection now (inbound ones included), which count as accepted
// whatever an earlier connection said.
func (r *refusals) count(why int, live map[string]bool) (n, tried int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, w := range r.last {
		if live[key] {
			continue // counted below
		}
		tried++
		if w == why {
			n++
		}
	}
	return n, tried + len(live)
}

// livePeers is the set of peer keys with a live connection.
func (t *Transport) livePeers() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := map[string]bool{}
	for c, key := range t.conns {
		if key != "" && c.Context().Err() == nil {
			live[key] = true
		}
	}
	return live
}

// CertRefusals counts the peers whose last connection ended with a refusal
// of this node's certificate, and the peers tried (a last connection that
// ended, or a live one). refusing == tried > 0 means every peer this node
// tried refuses its certificate; a peer connected now, in either
// direction, accepts it (a healthy node's one refused dial, while its
// other peers had dialled in, made it look removed).
func (t *Transport) CertRefusals() (refusing, tried int) {
	return t.refused.count(endedRefusedUs, t.livePeers())
}

// PeerCertRefusals counts the peers whose last connection ended with this
// node refusing their certificate, and the peers tried, as CertRefusals
// does. refused == tried > 0 means this node trusts no peer: its own
// trust is out of date (the cluster replaced its CA root while it was
// down), or the peers are another cluster's.
func (t *Transport) PeerCertRefusals() (refused, tried int) {
	return t.refused.count(endedRefusedIt, t.livePeers())
}

// connEnded records why a peer connection ended.
func (t *Transport) connEnded(c *quic.Conn, key string) {
	t.refused.note(key, context.Cause(c.Context()))
}
