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

func (r *refusals) count(why int) (n, ended int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.last {
		ended++
		if w == why {
			n++
		}
	}
	return n, ended
}

// CertRefusals counts the peers whose last connection ended with a refusal
// of this node's certificate, and the peers whose last connection ended at
// all (failed to dial or closed). refusing == ended > 0 means every peer
// this node tried refuses its certificate.
func (t *Transport) CertRefusals() (refusing, ended int) { return t.refused.count(endedRefusedUs) }

// PeerCertRefusals counts the peers whose last connection ended with this
// node refusing their certificate, and the peers whose last connection
// ended at all. refused == ended > 0 means this node trusts no peer it
// tried: its own trust is out of date (the cluster replaced its CA root
// while it was down), or the peers are another cluster's.
func (t *Transport) PeerCertRefusals() (refused, ended int) { return t.refused.count(endedRefusedIt) }

// connEnded records why a peer connection ended.
func (t *Transport) connEnded(c *quic.Conn, key string) {
	t.refused.note(key, context.Cause(c.Context()))
}
