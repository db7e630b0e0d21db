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

// refusals remembers, per peer address, whether the last peer connection
// ended with the peer refusing this end's certificate.
type refusals struct {
	mu   sync.Mutex
	last map[string]bool
}

func (r *refusals) note(key string, err error) {
	if key == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]bool{}
	}
	r.last[key] = CertRefused(err)
}

// CertRefusals counts the peers whose last connection ended with a refusal
// of this node's certificate, and the peers whose last connection ended at
// all (failed to dial or closed). refusing == ended > 0 means every peer
// this node tried refuses its certificate.
func (t *Transport) CertRefusals() (refusing, ended int) {
	t.refused.mu.Lock()
	defer t.refused.mu.Unlock()
	for _, r := range t.refused.last {
		ended++
		if r {
			refusing++
		}
	}
	return refusing, ended
}

// connEnded records why a peer connection ended.
func (t *Transport) connEnded(c *quic.Conn, key string) {
	t.refused.note(key, context.Cause(c.Context()))
}
