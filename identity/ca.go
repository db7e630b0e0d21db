package identity

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

const (
	caCertFile = "ca.crt"
	caKeyFile  = "ca.key"
	// rootLifetime is the validity of a new cluster root.
	rootLifetime = 10 * 365 * 24 * time.Hour
	// defaultCertTTL is the lifetime of a leaf when Sign is given ttl <= 0.
	defaultCertTTL = 24 * time.Hour
	// maxClusterNameLen is X.509's upper bound for an Organization name.
	maxClusterNameLen = 64
)

// CA is the cluster's certificate authority: the root certificate and key in
// a directory, and an embedded authority that issues node and device
// certificates from CSRs. It is safe for concurrent use.
type CA struct {
	dir         string
	root        *x509.Certificate
	key         crypto.Signer
	fingerprint string
	clusterName string
	step        *stepAuthority
	log         *slog.Logger
	closeOnce   sync.Once
	closeErr    error
}

// InitCA creates a new cluster CA in dir (created with mode 0700 if missing):
// an ECDSA P-256 root key (ca.key, mode 0600) and a self-signed root
// certificate valid for 10 years (ca.crt). It fails with ErrCAExists if dir
// already holds a CA. The returned CA uses the default in-process AuthDB;
// reopen it with LoadCA to pass options.
func InitCA(dir string, clusterName string) (*CA, error) {
	if err := validClusterName(clusterName); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA directory: %w", err)
	}
	certPath := filepath.Join(dir, caCertFile)
	if _, err := os.Lstat(certPath); err == nil {
		return nil, fmt.Errorf("%w in %s (%s); load it instead, or use an empty directory to start a new cluster", ErrCAExists, dir, caCertFile)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate root key: %w", err)
	}
	root, err := newRootCert(key, clusterName, clusterName+" root CA")
	if err != nil {
		return nil, err
	}
	if err := writeCAFiles(dir, root, key); err != nil {
		return nil, err
	}
	return LoadCA(dir)
}

// writeCAFiles writes key (ca.key, 0600) and then root (ca.crt) into dir.
// ca.crt is written last and never overwritten: it marks a complete CA. A
// ca.key without ca.crt is left over from an interrupted write.
func writeCAFiles(dir string, root *x509.Certificate, key crypto.Signer) error {
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, caKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeFileExclusive(filepath.Join(dir, caCertFile), encodeCertsPEM(root), 0o644); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w in %s: another process created it just now", ErrCAExists, dir)
		}
		return err
	}
	return nil
}

// newRootCert self-signs a cluster root for key. Its Organization is the
// cluster name; commonName tells roots of one cluster apart after a rotation.
func newRootCert(key *ecdsa.PrivateKey, clusterName, commonName string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("root serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{clusterName}},
		NotBefore:             now.Add(-certBackdate),
		NotAfter:              now.Add(rootLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1, // room for one intermediate level later
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign root: %w", err)
	}
	return x509.ParseCertificate(der)
}

// LoadCA opens the CA that InitCA created in dir. It fails with ErrNoCA if
// there is none, and with a message naming the file if ca.crt or ca.key is
// damaged, mismatched or readable by others.
func LoadCA(dir string, opts ...CAOption) (*CA, error) {
	o := caOptions{logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	root, key, err := readCAFiles(dir)
	if err != nil {
		return nil, err
	}
	name := ""
	if len(root.Subject.Organization) > 0 {
		name = root.Subject.Organization[0]
	}
	step, err := newStepAuthority(root, key, name, o)
	if err != nil {
		return nil, fmt.Errorf("load CA in %s: %w", dir, err)
	}
	sum := sha256.Sum256(root.Raw)
	return &CA{
		dir:         dir,
		root:        root,
		key:         key,
		fingerprint: hex.EncodeToString(sum[:]),
		clusterName: name,
		step:        step,
		log:         o.logger,
	}, nil
}

// readCAFiles reads and cross-checks ca.crt and ca.key in dir.
func readCAFiles(dir string) (*x509.Certificate, crypto.Signer, error) {
	certPath := filepath.Join(dir, caCertFile)
	keyPath := filepath.Join(dir, caKeyFile)
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w in %s (%s not found); the first node of a cluster creates it, other nodes join by pairing", ErrNoCA, dir, caCertFile)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read CA certificate: %w", err)
	}
	certs, err := decodeCertsPEM(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s is damaged: %w; restore it from a backup of %s", certPath, err, dir)
	}
	root := certs[0]
	if !root.IsCA || root.CheckSignatureFrom(root) != nil {
		return nil, nil, fmt.Errorf("%s is not a self-signed CA certificate; restore it from a backup of %s", certPath, dir)
	}
	if time.Now().After(root.NotAfter) {
		return nil, nil, fmt.Errorf("cluster CA in %s expired on %s; the cluster needs a new CA", dir, root.NotAfter.Format(time.DateOnly))
	}
	keyPEM, err := readKeyFile(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w in %s: %s is present but %s is missing; this node holds only the CA certificate", ErrNoCA, dir, caCertFile, caKeyFile)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read CA key: %w", err)
	}
	key, err := decodeKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s is damaged: %w; restore it from a backup of %s", keyPath, err, dir)
	}
	if !samePublicKey(key.Public(), root.PublicKey) {
		return nil, nil, fmt.Errorf("%s does not match %s (they come from different CAs); restore the pair from one backup", keyPath, certPath)
	}
	return root, key, nil
}

// validClusterName accepts 1-64 printable characters.
func validClusterName(name string) error {
	if name == "" || len(name) > maxClusterNameLen {
		return fmt.Errorf("cluster name %q must be 1-%d characters, e.g. \"home-lab\"", name, maxClusterNameLen)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("cluster name %q contains a control character", name)
		}
	}
	return nil
}

// Root returns the cluster root certificate.
func (c *CA) Root() *x509.Certificate { return c.root }

// Fingerprint returns the lower-case hex SHA-256 of the root certificate's
// DER, which pairing codes pin.
func (c *CA) Fingerprint() string { return c.fingerprint }

// ClusterName returns the name given to InitCA (the root's Organization).
func (c *CA) ClusterName() string { return c.clusterName }

// Sign issues a certificate for p to the holder of the key in csrDER and
// returns the leaf followed by its chain (empty while the root signs leaves
// directly; the root itself is never included). The leaf names p whatever the
// CSR asks for; a CSR that names anyone else, carries a bad signature or a key
// other than ECDSA P-256 is refused with ErrBadCSR. ttl <= 0 means 24h; it
// may be 1 minute to 90 days. NotBefore is one minute in the past.
func (c *CA) Sign(ctx context.Context, csrDER []byte, p Principal, ttl time.Duration) ([]*x509.Certificate, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		ttl = defaultCertTTL
	}
	if ttl < minCertTTL || ttl > maxCertTTL {
		return nil, fmt.Errorf("certificate lifetime %s for %s is outside %s-%s", ttl, p, minCertTTL, maxCertTTL)
	}
	csr, err := checkCSR(csrDER, p)
	if err != nil {
		return nil, err
	}
	chain, err := c.step.sign(ctx, csr, p, ttl)
	if err != nil {
		return nil, fmt.Errorf("issue certificate for %s: %w", p, err)
	}
	leaf := chain[0]
	if got, err := PrincipalFromCert(leaf); err != nil || got != p {
		return nil, fmt.Errorf("issue certificate for %s: authority produced a certificate for %v (%v)", p, got, err)
	}
	out := []*x509.Certificate{leaf}
	for _, ic := range chain[1:] {
		if !bytes.Equal(ic.Raw, c.root.Raw) {
			out = append(out, ic)
		}
	}
	c.log.Debug("issued certificate", "principal", p.String(), "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter)
	return out, nil
}

// checkCSR parses csrDER and checks its signature, key type and names.
func checkCSR(csrDER []byte, p Principal) (*x509.CertificateRequest, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, fmt.Errorf("%w for %s: not a DER CSR: %v", ErrBadCSR, p, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w for %s: signature does not verify with the CSR's own key (%v); create the CSR with identity.NewKeyAndCSR", ErrBadCSR, p, err)
	}
	if !isP256(csr.PublicKey) {
		return nil, fmt.Errorf("%w for %s: key is %T, the cluster issues only ECDSA P-256 certificates", ErrBadCSR, p, csr.PublicKey)
	}
	if cn := csr.Subject.CommonName; cn != "" && cn != p.ID {
		return nil, fmt.Errorf("%w: CSR names %q but is being signed for %s", ErrBadCSR, cn, p)
	}
	if len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.EmailAddresses) > 0 {
		return nil, fmt.Errorf("%w for %s: CSR asks for DNS, IP or e-mail names; cluster certificates carry only the principal URI", ErrBadCSR, p)
	}
	want := p.uri().String()
	for _, u := range csr.URIs {
		if u.String() != want {
			return nil, fmt.Errorf("%w: CSR names %q but is being signed for %s (%s)", ErrBadCSR, u, p, want)
		}
	}
	return csr, nil
}

// extKeyUsages returns the extended key usages of a leaf for kind: nodes
// serve and dial, devices only dial.
func extKeyUsages(kind Kind) []x509.ExtKeyUsage {
	if kind == KindNode {
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
}

// CrossSign certifies newRoot's subject and key under this CA: a peer that
// trusts only this CA's root accepts leaves issued by newRoot when they come
// with the returned certificate as an intermediate. It is what lets a CA
// rotation go without a failed handshake. It is valid until the earlier of
// the two roots' expiry, and allows no further intermediate below it.
func (c *CA) CrossSign(newRoot *x509.Certificate) (*x509.Certificate, error) {
	if newRoot == nil || !newRoot.IsCA || newRoot.CheckSignatureFrom(newRoot) != nil {
		return nil, errors.New("cross-sign: not a self-signed CA certificate")
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("cross-sign serial: %w", err)
	}
	notAfter := c.root.NotAfter
	if newRoot.NotAfter.Before(notAfter) {
		notAfter = newRoot.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               newRoot.Subject,
		SubjectKeyId:          newRoot.SubjectKeyId,
		NotBefore:             time.Now().Add(-certBackdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.root, newRoot.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("cross-sign %q: %w", newRoot.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

// keyDER returns the CA's private key as PKCS#8 DER, for a hand-off to
// another voter.
func (c *CA) keyDER() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	return der, nil
}

// Close stops the embedded authority. A database given with WithAuthDB is
// left open. Close is idempotent.
func (c *CA) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.step.close() })
	return c.closeErr
}
