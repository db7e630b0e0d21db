package identity

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Live holds the credential a running node or client presents. Renewal
// swaps it atomically: TLS configs built with LiveServerTLSConfig and
// LiveClientTLSConfig read it on every handshake, so a renewed certificate
// is used from the next handshake on, with no restart and no dropped
// connection (established connections keep the certificate they began with).
type Live struct {
	p atomic.Pointer[Credential]
}

// NewLive returns a Live presenting c.
func NewLive(c *Credential) *Live {
	l := &Live{}
	l.p.Store(c)
	return l
}

// Current returns the credential presented now.
func (l *Live) Current() *Credential { return l.p.Load() }

// Swap replaces the presented credential. The new one must be for the same
// principal and chain to the same roots.
func (l *Live) Swap(c *Credential) error {
	old := l.Current()
	if c == nil || c.Leaf == nil || c.Key == nil {
		return fmt.Errorf("%w: incomplete credential", ErrNoCredential)
	}
	if old != nil && c.Principal != old.Principal {
		return fmt.Errorf("%w: renewal for %s cannot replace %s", ErrBadPrincipal, c.Principal, old.Principal)
	}
	l.p.Store(c)
	return nil
}

// RenewAt is when a certificate should be renewed: two thirds into its
// lifetime, so a renewal that fails has a third of the lifetime to retry.
// Lifetimes are counted from the issue time: NotBefore is backdated by
// certBackdate for clock skew, which must not pull renewal earlier.
func RenewAt(leaf *x509.Certificate) time.Time {
	issued := leaf.NotBefore
	if issued.Add(certBackdate).Before(leaf.NotAfter) {
		issued = issued.Add(certBackdate)
	}
	return issued.Add(leaf.NotAfter.Sub(issued) * 2 / 3)
}

// presented is the certificate chain a Live credential presents: leaf,
// intermediates and the root, so an unpaired joiner can pin the root's
// fingerprint from its pairing code.
func presented(c *Credential) (*tls.Certificate, error) {
	if c == nil || c.Leaf == nil || c.Key == nil {
		return nil, fmt.Errorf("%w: no certificate to present", ErrNoCredential)
	}
	tc := c.TLSCertificate()
	for _, r := range c.RootCerts {
		tc.Certificate = append(tc.Certificate, r.Raw)
	}
	return &tc, nil
}

// LiveServerTLSConfig is ServerTLSConfig over a Live credential. With
// allowUnauthenticated, a client may connect without any certificate (its
// requests then reach only what the server allows unauthenticated: the
// pairing call); a certificate that is presented must still verify.
func LiveServerTLSConfig(l *Live, nextProtos []string, check PeerCheck, allowUnauthenticated bool) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: nextProtos}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return presented(l.Current()) }
	cfg.ClientAuth = tls.RequireAnyClientCert
	if allowUnauthenticated {
		cfg.ClientAuth = tls.RequestClientCert
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if allowUnauthenticated && len(cs.PeerCertificates) == 0 {
			return nil
		}
		_, err := verifyPeer(cs.PeerCertificates, l.Current().roots(), x509.ExtKeyUsageClientAuth, "", check)
		return err
	}
	return cfg
}

// LiveClientTLSConfig is ClientTLSConfig over a Live credential.
func LiveClientTLSConfig(l *Live, nextProtos []string, check PeerCheck) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: nextProtos, InsecureSkipVerify: true}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c := l.Current()
		if c == nil || c.Leaf == nil {
			return nil, errors.New("no client certificate")
		}
		tc := c.TLSCertificate()
		return &tc, nil
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		_, err := verifyPeer(cs.PeerCertificates, l.Current().roots(), x509.ExtKeyUsageServerAuth, KindNode, check)
		return err
	}
	return cfg
}

// Authenticated reports whether a connection presented a client
// certificate (which the config then verified).
func Authenticated(cs tls.ConnectionState) bool { return len(cs.PeerCertificates) > 0 }
