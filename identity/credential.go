package identity

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Credential is a node's or device's identity: its certificate, the key that
// never left the machine, and the cluster roots it trusts.
type Credential struct {
	Principal Principal
	Leaf      *x509.Certificate
	Chain     []*x509.Certificate // intermediates after Leaf (none today)
	Key       crypto.Signer
	Roots     *x509.CertPool
	// RootCerts are the trust anchors as certificates, which SaveCredential
	// writes to ca.pem (a CertPool cannot be listed). If Roots is nil, the
	// TLS configs build it from RootCerts.
	RootCerts []*x509.Certificate
}

// Files of a credential directory.
const (
	credCertFile = "cert.pem" // leaf, then chain
	credKeyFile  = "key.pem"  // private key, mode 0600
	credCAFile   = "ca.pem"   // cluster roots
)

// TLSCertificate returns the leaf, chain and key as a tls.Certificate.
func (c *Credential) TLSCertificate() tls.Certificate {
	der := make([][]byte, 0, 1+len(c.Chain))
	der = append(der, c.Leaf.Raw)
	for _, ic := range c.Chain {
		der = append(der, ic.Raw)
	}
	return tls.Certificate{Certificate: der, PrivateKey: c.Key, Leaf: c.Leaf}
}

// roots returns c.Roots, or a pool of c.RootCerts if Roots is nil.
func (c *Credential) roots() *x509.CertPool {
	if c.Roots != nil {
		return c.Roots
	}
	pool := x509.NewCertPool()
	for _, r := range c.RootCerts {
		pool.AddCert(r)
	}
	return pool
}

// check verifies that the credential hangs together: a leaf naming
// c.Principal, a key matching the leaf, and a leaf issued under the roots.
// Expiry is not checked (an expired credential still loads, so it can be
// renewed or replaced); peers check it on every handshake.
func (c *Credential) check() error {
	if c.Leaf == nil || c.Key == nil {
		return errors.New("credential has no certificate or no key")
	}
	p, err := PrincipalFromCert(c.Leaf)
	if err != nil {
		return err
	}
	if c.Principal != (Principal{}) && p != c.Principal {
		return fmt.Errorf("certificate names %s but the credential is for %s", p, c.Principal)
	}
	if !samePublicKey(c.Key.Public(), c.Leaf.PublicKey) {
		return errors.New("private key does not match the certificate")
	}
	inter := x509.NewCertPool()
	for _, ic := range c.Chain {
		inter.AddCert(ic)
	}
	mid := c.Leaf.NotBefore.Add(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore) / 2)
	if _, err := c.Leaf.Verify(x509.VerifyOptions{
		Roots:         c.roots(),
		Intermediates: inter,
		CurrentTime:   mid,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return fmt.Errorf("certificate was not issued by the cluster CA in %s: %w", credCAFile, err)
	}
	return nil
}

// SaveCredential writes c to dir (created with mode 0700): cert.pem (leaf and
// chain), key.pem (mode 0600) and ca.pem (RootCerts). The three files are
// replaced together: a crash part-way leaves either the old credential or the
// new one, which the next LoadCredential completes. One writer per directory.
func SaveCredential(dir string, c *Credential) error {
	if c == nil {
		return errors.New("save credential: nil credential")
	}
	if len(c.RootCerts) == 0 {
		return fmt.Errorf("save credential to %s: RootCerts is empty, nothing to write to %s", dir, credCAFile)
	}
	if err := c.check(); err != nil {
		return fmt.Errorf("save credential to %s: %w", dir, err)
	}
	keyPEM, err := encodeKeyPEM(c.Key)
	if err != nil {
		return fmt.Errorf("save credential to %s: %w", dir, err)
	}
	files := map[string][]byte{
		credCertFile: encodeCertsPEM(append([]*x509.Certificate{c.Leaf}, c.Chain...)...),
		credKeyFile:  keyPEM,
		credCAFile:   encodeCertsPEM(c.RootCerts...),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save credential: %w", err)
	}
	if err := stageCredential(dir, files); err != nil {
		return fmt.Errorf("save credential to %s: %w", dir, err)
	}
	if err := commitCredential(dir); err != nil {
		return fmt.Errorf("save credential to %s: %w", dir, err)
	}
	return nil
}

// LoadCredential reads the credential SaveCredential wrote to dir, finishing
// an interrupted save first. It fails with ErrNoCredential if there is none
// and with ErrInsecureKeyFile if key.pem is readable by group or others.
//
// A save by another process (a node renewing the local operator's
// credential, another palyra command renewing a device's) may rename the
// files while they are being read; a read whose files do not belong
// together is read again.
func LoadCredential(dir string) (*Credential, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var c *Credential
		c, err = loadCredentialOnce(dir)
		var torn *tornReadError
		if !errors.As(err, &torn) {
			return c, err
		}
		time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
	}
	return nil, err
}

// tornReadError marks a credential whose files did not belong together,
// which a concurrent save can cause.
type tornReadError struct{ err error }

func (e *tornReadError) Error() string { return e.err.Error() }
func (e *tornReadError) Unwrap() error { return e.err }

func loadCredentialOnce(dir string) (*Credential, error) {
	// Read-only for saves in progress: only a committed save is rolled
	// forward (idempotent, safe while its writer commits too). Uncommitted
	// staged files may belong to a save another process is making right
	// now; discarding them is the next writer's job (stageCredential).
	if err := rollForwardCommitted(dir); err != nil {
		return nil, fmt.Errorf("load credential: finish interrupted save in %s: %w", dir, err)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, credCertFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s; start a node there or pair this device with 'palyra device pair'", ErrNoCredential, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("load credential: %w", err)
	}
	certs, err := decodeCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s is damaged: %w; pair again with 'palyra device pair'", filepath.Join(dir, credCertFile), err)
	}
	keyPath := filepath.Join(dir, credKeyFile)
	keyPEM, err := readKeyFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("load credential: %w", err)
	}
	key, err := decodeKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s is damaged: %w; pair again with 'palyra device pair'", keyPath, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, credCAFile))
	if err != nil {
		return nil, fmt.Errorf("load credential: %w", err)
	}
	rootCerts, err := decodeCertsPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s is damaged: %w; pair again with 'palyra device pair'", filepath.Join(dir, credCAFile), err)
	}
	c := &Credential{Leaf: certs[0], Chain: certs[1:], Key: key, RootCerts: rootCerts}
	c.Roots = c.roots()
	if c.Principal, err = PrincipalFromCert(c.Leaf); err != nil {
		return nil, fmt.Errorf("credential in %s: %w", dir, err)
	}
	if err := c.check(); err != nil {
		return nil, &tornReadError{fmt.Errorf("credential in %s: %w", dir, err)}
	}
	return c, nil
}
