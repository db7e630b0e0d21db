package identity

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// PeerCheck is an extra test a verified peer must pass, e.g. a revocation
// denylist. It runs on every handshake, resumed ones included. A nil
// PeerCheck accepts every verified peer.
type PeerCheck func(p Principal, leaf *x509.Certificate) error

// ServerTLSConfig returns a TLS 1.3 server config presenting c that requires
// a client certificate issued under c's roots for ClientAuth and naming a
// node or a device, and then passes check. Rejections come back from the
// handshake as errors wrapping ErrUntrustedPeer or ErrPeerRejected.
func ServerTLSConfig(c *Credential, nextProtos []string, check PeerCheck) *tls.Config {
	cfg, roots, credErr := baseTLSConfig(c, nextProtos)
	// Ask for any certificate and verify it ourselves, to say in plain words
	// why a peer was refused.
	cfg.ClientAuth = tls.RequireAnyClientCert
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if credErr != nil {
			return credErr
		}
		_, err := verifyPeer(cs.PeerCertificates, roots, x509.ExtKeyUsageClientAuth, "", check)
		return err
	}
	return cfg
}

// ClientTLSConfig returns a TLS 1.3 client config presenting c that accepts
// only a server whose certificate chains to c's roots, is valid for
// ServerAuth, names a node, and passes check. Host names are not verified:
// nodes are dialled by IP:port and named by their certificate instead.
func ClientTLSConfig(c *Credential, nextProtos []string, check PeerCheck) *tls.Config {
	cfg, roots, credErr := baseTLSConfig(c, nextProtos)
	// Standard verification checks the host name, which means nothing here;
	// VerifyConnection does the chain and principal checks instead.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if credErr != nil {
			return credErr
		}
		_, err := verifyPeer(cs.PeerCertificates, roots, x509.ExtKeyUsageServerAuth, KindNode, check)
		return err
	}
	return cfg
}

// baseTLSConfig is the part of both configs that presents c. An incomplete
// credential yields a config whose every handshake fails with the returned
// error, which wraps ErrNoCredential.
func baseTLSConfig(c *Credential, nextProtos []string) (*tls.Config, *x509.CertPool, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: nextProtos}
	if c == nil || c.Leaf == nil || c.Key == nil {
		err := fmt.Errorf("%w: TLS config built without a certificate and key; load one with LoadCredential", ErrNoCredential)
		cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, err }
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return nil, err }
		return cfg, x509.NewCertPool(), err
	}
	cfg.Certificates = []tls.Certificate{c.TLSCertificate()}
	return cfg, c.roots(), nil
}

// PeerPrincipal returns the principal of the peer of a completed handshake.
// It trusts that the connection was made with ServerTLSConfig or
// ClientTLSConfig, which verified the peer; it does not verify again.
func PeerPrincipal(cs tls.ConnectionState) (Principal, error) {
	if !cs.HandshakeComplete {
		return Principal{}, errors.New("peer principal: TLS handshake not complete")
	}
	if len(cs.PeerCertificates) == 0 {
		return Principal{}, fmt.Errorf("%w: peer presented no certificate", ErrUntrustedPeer)
	}
	return PrincipalFromCert(cs.PeerCertificates[0])
}

// verifyPeer checks a peer's certificate chain against roots for usage,
// reads its principal, requires kind (if not empty) and runs check.
func verifyPeer(certs []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, kind Kind, check PeerCheck) (Principal, error) {
	if len(certs) == 0 {
		return Principal{}, fmt.Errorf("%w: peer presented no certificate; it must pair with the cluster first", ErrUntrustedPeer)
	}
	leaf := certs[0]
	name := leaf.Subject.CommonName
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   time.Now(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return Principal{}, explainVerifyError(name, leaf, usage, err)
	}
	p, err := PrincipalFromCert(leaf)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrUntrustedPeer, err)
	}
	if kind != "" && p.Kind != kind {
		return Principal{}, fmt.Errorf("%w: peer is %s, expected a %s", ErrUntrustedPeer, p, kind)
	}
	if check != nil {
		if err := check(p, leaf); err != nil {
			return Principal{}, fmt.Errorf("%w: %s: %w", ErrPeerRejected, p, err)
		}
	}
	return p, nil
}

// explainVerifyError turns an x509 verification failure into a sentence
// saying what is wrong with the peer and what to do.
func explainVerifyError(name string, leaf *x509.Certificate, usage x509.ExtKeyUsage, err error) error {
	var (
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("%w: certificate %q (issuer %q) is not signed by this cluster's CA; it belongs to another cluster or is self-signed, so the peer must pair with this cluster: %w",
			ErrUntrustedPeer, name, leaf.Issuer.CommonName, err)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Errorf("%w: certificate %q is outside its validity (%s to %s); it must be renewed, or the peer paired again (also check both clocks): %w",
			ErrUntrustedPeer, name, leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339), err)
	case errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage:
		role := "client"
		if usage == x509.ExtKeyUsageServerAuth {
			role = "server (only nodes serve)"
		}
		return fmt.Errorf("%w: certificate %q is not valid for use as a TLS %s: %w", ErrUntrustedPeer, name, role, err)
	default:
		return fmt.Errorf("%w: certificate %q does not verify: %w", ErrUntrustedPeer, name, err)
	}
}
