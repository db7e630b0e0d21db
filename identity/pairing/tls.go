package pairing

import (
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/palyra-mesh/palyra/identity"
)

// PinnedClientTLS returns the TLS 1.3 config a joiner dials the pairing
// endpoint with. It presents no certificate (the joiner has none yet) and
// accepts the server only if the last certificate it presents is a
// self-signed CA matching c's pin, and the first is a node's certificate
// issued under that CA for ServerAuth. Host names are not checked. The
// handshake fails with an error wrapping ErrPinMismatch when the server
// belongs to another cluster, and identity.ErrUntrustedPeer for the rest.
func PinnedClientTLS(c Code, nextProtos []string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: nextProtos,
		// Standard verification needs a trust store and a host name; the
		// pin replaces both, checked in VerifyConnection, which also runs
		// on resumed sessions.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyPinned(c, cs.PeerCertificates, time.Now())
			return err
		},
	}
}

// verifyPinned checks a server's chain (leaf first, root last) against c's
// pin and returns the root.
func verifyPinned(c Code, certs []*x509.Certificate, now time.Time) (*x509.Certificate, error) {
	if !c.kind.Valid() {
		return nil, errors.New("pairing dial without a pairing code; make one with New or Parse")
	}
	switch len(certs) {
	case 0:
		return nil, fmt.Errorf("%w: server presented no certificate; is --peer a palyra node's address?", identity.ErrUntrustedPeer)
	case 1:
		return nil, fmt.Errorf("%w: server presented only its own certificate, not its cluster's root, so it cannot be checked against the pairing code; is --peer a palyra node's pairing address, running the same release?",
			identity.ErrUntrustedPeer)
	}
	// The pinned root is the last certificate, or (during a CA rotation,
	// when the node presents every trusted root) any after the leaf.
	leaf := certs[0]
	var root *x509.Certificate
	var others []*x509.Certificate
	for _, cert := range certs[1:] {
		if root == nil && c.PinMatches(cert.Raw) {
			root = cert
			continue
		}
		others = append(others, cert)
	}
	if root == nil {
		last := certs[len(certs)-1]
		return nil, fmt.Errorf("%w; check that --peer is a node of that cluster and the code is the one it printed (this server's CA is %q, SHA-256 %x)",
			ErrPinMismatch, last.Subject.CommonName, sha256.Sum256(last.Raw))
	}
	if !root.BasicConstraintsValid || !root.IsCA {
		return nil, fmt.Errorf("%w: server's root %q is not a CA certificate", identity.ErrUntrustedPeer, root.Subject.CommonName)
	}
	if err := root.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("%w: server's root %q is not self-signed: %w", identity.ErrUntrustedPeer, root.Subject.CommonName, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, ic := range others {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
			return nil, fmt.Errorf("%w: server certificate %q is valid %s to %s, not now (%s); check this machine's clock: %w",
				identity.ErrUntrustedPeer, leaf.Subject.CommonName, leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339), now.Format(time.RFC3339), err)
		}
		return nil, fmt.Errorf("%w: server certificate %q is not a server certificate of the pinned cluster: %w", identity.ErrUntrustedPeer, leaf.Subject.CommonName, err)
	}
	p, err := identity.PrincipalFromCert(leaf)
	if err != nil {
		return nil, fmt.Errorf("%w: server certificate: %w", identity.ErrUntrustedPeer, err)
	}
	if p.Kind != identity.KindNode {
		return nil, fmt.Errorf("%w: server is %s, but only nodes serve pairing", identity.ErrUntrustedPeer, p)
	}
	return root, nil
}

// ServerRoot returns the cluster root a server presented on a connection
// made with PinnedClientTLS, which already checked it against the code; the
// joiner keeps it as its trust anchor.
func ServerRoot(cs tls.ConnectionState) (*x509.Certificate, error) {
	if !cs.HandshakeComplete || len(cs.PeerCertificates) < 2 {
		return nil, fmt.Errorf("%w: no verified pairing handshake; dial with PinnedClientTLS", identity.ErrUntrustedPeer)
	}
	return cs.PeerCertificates[len(cs.PeerCertificates)-1], nil
}

// ServerTLS returns the TLS 1.3 config of a node's pairing endpoint. It
// presents cred's leaf, its chain and the cluster root that issued it (so a
// joiner can check the root against its pin) and asks for no client
// certificate: joiners have none yet. Serve nothing but pairing with it.
func ServerTLS(cred *identity.Credential, nextProtos []string) (*tls.Config, error) {
	if cred == nil || cred.Leaf == nil || cred.Key == nil {
		return nil, fmt.Errorf("%w: the pairing endpoint needs the node's certificate and key; load them with identity.LoadCredential", identity.ErrNoCredential)
	}
	p, err := identity.PrincipalFromCert(cred.Leaf)
	if err != nil {
		return nil, fmt.Errorf("pairing server certificate: %w", err)
	}
	if p.Kind != identity.KindNode {
		return nil, fmt.Errorf("pairing endpoint needs a node certificate, not %s's", p)
	}
	last := cred.Leaf
	if n := len(cred.Chain); n > 0 {
		last = cred.Chain[n-1]
	}
	var root *x509.Certificate
	for _, r := range cred.RootCerts {
		if last.CheckSignatureFrom(r) == nil {
			root = r
			break
		}
	}
	if root == nil {
		return nil, fmt.Errorf("%w: none of the credential's %d root certificates issued %q; the credential is incomplete (ca.pem)",
			identity.ErrNoCredential, len(cred.RootCerts), last.Subject.CommonName)
	}
	cert := cred.TLSCertificate()
	cert.Certificate = append(cert.Certificate, root.Raw)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   nextProtos,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.NoClientCert,
	}, nil
}

// NewCredential assembles the joiner's credential from the key it generated,
// the chain the cluster returned (DER, leaf first) and the root ServerRoot
// returned. It checks that the leaf carries key's public key, verifies under
// root (or one of also) for ClientAuth now, and names a valid principal.
// also is the rest of the cluster's trust bundle, which the credential
// trusts as well: during a CA rotation a code pins the old root while the
// leaf comes from the new one.
func NewCredential(key crypto.Signer, chainDER [][]byte, root *x509.Certificate, also ...*x509.Certificate) (*identity.Credential, error) {
	if key == nil || root == nil {
		return nil, errors.New("pairing reply: NewCredential needs the joiner's key and the pinned root")
	}
	if len(chainDER) == 0 {
		return nil, errors.New("pairing reply holds no certificate; the server is faulty, try another --peer")
	}
	certs := make([]*x509.Certificate, len(chainDER))
	for i, der := range chainDER {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("pairing reply: certificate %d: %w", i+1, err)
		}
		certs[i] = c
	}
	leaf := certs[0]
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, errors.New("pairing reply: the certificate is not for this joiner's key; the server is faulty, try another --peer")
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	rootCerts := []*x509.Certificate{root}
	for _, r := range also {
		if r != nil && !r.Equal(root) {
			roots.AddCert(r)
			rootCerts = append(rootCerts, r)
		}
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("pairing reply: certificate does not verify under the pinned CA (check this machine's clock): %w", err)
	}
	p, err := identity.PrincipalFromCert(leaf)
	if err != nil {
		return nil, fmt.Errorf("pairing reply: %w", err)
	}
	return &identity.Credential{
		Principal: p,
		Leaf:      leaf,
		Chain:     certs[1:],
		Key:       key,
		Roots:     roots,
		RootCerts: rootCerts,
	}, nil
}
