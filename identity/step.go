package identity

// This is the only file that imports github.com/smallstep/certificates: the
// embedded authority is heavy, and keeping it behind stepAuthority lets the
// rest of the package (and every other package) see plain crypto/x509.

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/smallstep/certificates/authority"
	"github.com/smallstep/certificates/authority/config"
	"github.com/smallstep/certificates/authority/provisioner"
	"github.com/smallstep/certificates/db"
	"go.step.sm/crypto/jose"
	"golang.org/x/crypto/ssh"
)

const (
	// provisionerName is the JWK provisioner every certificate is issued through.
	provisionerName = "palyra"
	// caHostname only forms the token audience; nothing is served under it.
	caHostname = "palyra-ca"
	// tokenLifetime bounds how long a minted one-time token is accepted.
	tokenLifetime = 5 * time.Minute
	// provisionerKeyInfo is the HKDF label that derives the provisioner key
	// from the root key.
	provisionerKeyInfo = "palyra identity: JWK provisioner key v1"
	// Certificate lifetimes the authority allows.
	minCertTTL = 5 * time.Second
	maxCertTTL = 90 * 24 * time.Hour
	// certBackdate is how far NotBefore is set in the past, for clock skew.
	certBackdate = time.Minute
)

// CAOption configures LoadCA.
type CAOption func(*caOptions)

type caOptions struct {
	authDB db.AuthDB
	logger *slog.Logger
}

// WithAuthDB makes the authority keep its used one-time tokens, issued
// certificates and revocations in d instead of its default in-process map.
// The cluster passes a store replicated through Raft so "one-time" holds
// cluster-wide. The CA never shuts d down: its owner does.
func WithAuthDB(d db.AuthDB) CAOption {
	return func(o *caOptions) { o.authDB = d }
}

// WithLogger sets the logger for issuance events (default slog.Default()).
func WithLogger(l *slog.Logger) CAOption {
	return func(o *caOptions) {
		if l != nil {
			o.logger = l
		}
	}
}

// stepAuthority wraps an embedded smallstep authority with one JWK
// provisioner. Issuing a certificate mints a one-time token for the
// provisioner, authorises it (which records the token as used in the AuthDB)
// and signs the CSR with the options the token grants.
type stepAuthority struct {
	auth        *authority.Authority
	tokenSigner jose.Signer
	clusterName string
	audience    string
}

// borrowedDB hides Shutdown from the authority: Authority.Shutdown closes its
// database, but a database passed in with WithAuthDB belongs to the caller.
type borrowedDB struct{ db.AuthDB }

func (borrowedDB) Shutdown() error { return nil }

// StoreCertificate passes the authority's issued leaves on to the
// borrowed database when it keeps them (the cluster's ledger does).
func (b borrowedDB) StoreCertificate(c *x509.Certificate) error {
	if s, ok := b.AuthDB.(db.CertificateStorer); ok {
		return s.StoreCertificate(c)
	}
	return db.ErrNotImplemented
}

func (b borrowedDB) StoreSSHCertificate(c *ssh.Certificate) error {
	if s, ok := b.AuthDB.(db.CertificateStorer); ok {
		return s.StoreSSHCertificate(c)
	}
	return db.ErrNotImplemented
}

var (
	_ db.AuthDB            = borrowedDB{}
	_ db.CertificateStorer = borrowedDB{}
)

// newStepAuthority starts an embedded authority that signs leaves directly
// with the root key.
func newStepAuthority(root *x509.Certificate, rootKey crypto.Signer, clusterName string, o caOptions) (*stepAuthority, error) {
	provKey, err := deriveProvisionerKey(rootKey)
	if err != nil {
		return nil, err
	}
	pub := &jose.JSONWebKey{Key: provKey.Public(), Algorithm: jose.EdDSA, Use: "sig"}
	kid, err := jose.Thumbprint(pub)
	if err != nil {
		return nil, fmt.Errorf("provisioner key id: %w", err)
	}
	pub.KeyID = kid
	tokenSigner, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.EdDSA, Key: provKey},
		new(jose.SignerOptions).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		return nil, fmt.Errorf("token signer: %w", err)
	}

	cfg := &config.Config{
		DNSNames: []string{caHostname},
		AuthorityConfig: &config.AuthConfig{
			Provisioners: provisioner.List{&provisioner.JWK{
				Type: "JWK",
				Name: provisionerName,
				Key:  pub,
				Claims: &provisioner.Claims{
					MinTLSDur:     &provisioner.Duration{Duration: minCertTTL},
					MaxTLSDur:     &provisioner.Duration{Duration: maxCertTTL},
					DefaultTLSDur: &provisioner.Duration{Duration: defaultCertTTL},
				},
			}},
			// Tokens are checked against the used-token store, not against
			// this process's start time, so a token minted by one holder of
			// the CA key stays valid at another (e.g. after a leader change).
			DisableIssuedAtCheck: true,
			Backdate:             &provisioner.Duration{Duration: certBackdate},
		},
	}
	opts := []authority.Option{
		authority.WithConfig(cfg),
		authority.WithX509RootCerts(root),
		authority.WithX509Signer(root, rootKey),
		authority.WithQuietInit(),
	}
	if o.authDB != nil {
		opts = append(opts, authority.WithDatabase(borrowedDB{o.authDB}))
	}
	auth, err := authority.NewEmbedded(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded certificate authority: %w", err)
	}
	return &stepAuthority{
		auth:        auth,
		tokenSigner: tokenSigner,
		clusterName: clusterName,
		audience:    "https://" + caHostname + "/1.0/sign",
	}, nil
}

// deriveProvisionerKey derives the provisioner's Ed25519 key from the root
// key, so every holder of ca.key mints tokens every other holder accepts and
// the CA directory needs no third secret.
func deriveProvisionerKey(rootKey crypto.Signer) (ed25519.PrivateKey, error) {
	der, err := x509.MarshalPKCS8PrivateKey(rootKey)
	if err != nil {
		return nil, fmt.Errorf("derive provisioner key: %w", err)
	}
	seed, err := hkdf.Key(sha256.New, der, nil, provisionerKeyInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("derive provisioner key: %w", err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// tokenClaims is the payload of a one-time sign token.
type tokenClaims struct {
	jose.Claims
	SANs []string `json:"sans"`
}

// mintToken returns a one-time token that lets the bearer have a certificate
// for p signed. Its random jti is what the AuthDB records as used.
func (s *stepAuthority) mintToken(p Principal) (string, error) {
	var jti [16]byte
	_, _ = rand.Read(jti[:])
	now := time.Now()
	claims := tokenClaims{
		Claims: jose.Claims{
			ID:        hex.EncodeToString(jti[:]),
			Issuer:    provisionerName,
			Subject:   p.ID,
			Audience:  jose.Audience{s.audience},
			IssuedAt:  jose.NewNumericDate(now),
			NotBefore: jose.NewNumericDate(now),
			Expiry:    jose.NewNumericDate(now.Add(tokenLifetime)),
		},
		SANs: []string{p.uri().String()},
	}
	tok, err := jose.Signed(s.tokenSigner).Claims(claims).CompactSerialize()
	if err != nil {
		return "", fmt.Errorf("mint sign token for %s: %w", p, err)
	}
	return tok, nil
}

// signWithToken authorises token (consuming it) and signs csr for p. The
// leaf's names and key usages come from p, never from the CSR.
func (s *stepAuthority) signWithToken(ctx context.Context, token string, csr *x509.CertificateRequest, p Principal, ttl time.Duration) ([]*x509.Certificate, error) {
	ctx = authority.NewContext(ctx, s.auth)
	ctx = provisioner.NewContextWithMethod(ctx, provisioner.SignMethod)
	extra, err := s.auth.Authorize(ctx, token)
	if err != nil {
		return nil, fmt.Errorf("authorize sign token: %w", err)
	}
	var so provisioner.SignOptions
	so.NotAfter.SetDuration(ttl)
	extra = append(extra, provisioner.CertificateEnforcerFunc(func(c *x509.Certificate) error {
		shapeLeaf(c, p, s.clusterName)
		return nil
	}))
	chain, err := s.auth.SignWithContext(ctx, csr, so, extra...)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return chain, nil
}

// shapeLeaf makes the leaf name exactly p and carry the key usages of its
// kind, whatever template or CSR preceded it.
func shapeLeaf(c *x509.Certificate, p Principal, clusterName string) {
	c.Subject = pkix.Name{CommonName: p.ID, Organization: []string{clusterName}}
	c.DNSNames, c.IPAddresses, c.EmailAddresses = nil, nil, nil
	c.URIs = []*url.URL{p.uri()}
	c.KeyUsage = x509.KeyUsageDigitalSignature
	c.ExtKeyUsage = extKeyUsages(p.Kind)
	c.IsCA = false
}

// sign issues a certificate for p from an already checked CSR.
func (s *stepAuthority) sign(ctx context.Context, csr *x509.CertificateRequest, p Principal, ttl time.Duration) ([]*x509.Certificate, error) {
	token, err := s.mintToken(p)
	if err != nil {
		return nil, err
	}
	return s.signWithToken(ctx, token, csr, p, ttl)
}

// close stops the authority. A database given with WithAuthDB stays open.
func (s *stepAuthority) close() error {
	return s.auth.Shutdown()
}

// TokenLedger is the replicated record the CA keeps its one-time token ids,
// revoked serials and issued certificates in. UseToken must return false
// (and no error) for a token id that was used before anywhere in the
// cluster. RecordCert must have recorded leaf, durably and cluster-wide,
// when it returns nil: the certificate is handed out only then, and peers
// accept only certificates the ledger holds.
type TokenLedger interface {
	UseToken(id string) (bool, error)
	IsSerialRevoked(serial string) bool
	RevokeSerial(serial, reason string) error
	RecordCert(leaf *x509.Certificate) error
}

// WithTokenLedger keeps the authority's one-time-token and revocation state
// in l (the Raft-replicated store), so a token is one-time cluster-wide.
func WithTokenLedger(l TokenLedger) CAOption {
	return WithAuthDB(ledgerDB{l})
}

// ledgerDB adapts a TokenLedger to smallstep's db.AuthDB. The authority
// stores every leaf it signs (StoreCertificate) before Sign returns it, and
// a failed store fails the signing; certificates are not read back; SSH is
// not used.
type ledgerDB struct{ l TokenLedger }

var (
	_ db.AuthDB            = ledgerDB{}
	_ db.CertificateStorer = ledgerDB{}
)

func (d ledgerDB) StoreCertificate(crt *x509.Certificate) error { return d.l.RecordCert(crt) }
func (d ledgerDB) StoreSSHCertificate(*ssh.Certificate) error {
	return errors.New("ssh certificates are not used by palyra")
}

func (d ledgerDB) IsRevoked(sn string) (bool, error) { return d.l.IsSerialRevoked(sn), nil }
func (d ledgerDB) IsSSHRevoked(string) (bool, error) { return false, nil }
func (d ledgerDB) RevokeSSH(*db.RevokedCertificateInfo) error {
	return errors.New("ssh certificates are not used by palyra")
}
func (d ledgerDB) Revoke(rci *db.RevokedCertificateInfo) error {
	return d.l.RevokeSerial(rci.Serial, rci.Reason)
}
func (d ledgerDB) GetCertificate(string) (*x509.Certificate, error) {
	return nil, errors.New("certificates are not stored")
}
func (d ledgerDB) UseToken(id, _ string) (bool, error)     { return d.l.UseToken(id) }
func (d ledgerDB) IsSSHHost(string) (bool, error)          { return false, nil }
func (d ledgerDB) GetSSHHostPrincipals() ([]string, error) { return nil, nil }
func (d ledgerDB) Shutdown() error                         { return nil }
