package identity

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/url"
)

// Kind says what sort of member a principal is.
type Kind string

const (
	// KindNode is a mesh node: it serves and dials other nodes.
	KindNode Kind = "node"
	// KindDevice is an operator's machine (CLI) or other API client: it only dials.
	KindDevice Kind = "device"
)

// principalScheme is the URI scheme of the SAN that names a principal:
// palyra://node/ID or palyra://device/ID.
const principalScheme = "palyra"

// maxIDLen keeps IDs within a DNS label and well inside X.509's 64-char CN limit.
const maxIDLen = 63

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == KindNode || k == KindDevice }

// Principal is who a certificate speaks for: a node or a device with an ID
// unique in the cluster.
type Principal struct {
	Kind Kind
	ID   string
}

// String returns "node:ID" or "device:ID", the form used in logs and policy.
func (p Principal) String() string { return string(p.Kind) + ":" + p.ID }

// Validate returns an error wrapping ErrBadPrincipal if p's kind is unknown or
// its ID is not a valid ID.
func (p Principal) Validate() error {
	if !p.Kind.Valid() {
		return fmt.Errorf("%w: kind %q is neither %q nor %q", ErrBadPrincipal, p.Kind, KindNode, KindDevice)
	}
	if !validID(p.ID) {
		return fmt.Errorf("%w: id %q must be 1-%d characters of a-z, 0-9 and '-', starting with a letter or digit (e.g. %q)",
			ErrBadPrincipal, p.ID, maxIDLen, NewID(p.Kind))
	}
	return nil
}

// uri is the principal's URI SAN. p must be valid.
func (p Principal) uri() *url.URL {
	return &url.URL{Scheme: principalScheme, Host: string(p.Kind), Path: "/" + p.ID}
}

// NewID returns a short random ID for a new principal of kind: "n-" or "d-"
// followed by 8 lower-case hex digits (32 random bits). It is unique enough to
// name a machine; whoever registers it (pairing, through Raft) must still
// refuse a duplicate. An unknown kind gets the prefix "x-".
func NewID(kind Kind) string {
	prefix := "x-"
	switch kind {
	case KindNode:
		prefix = "n-"
	case KindDevice:
		prefix = "d-"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return prefix + hex.EncodeToString(b[:])
}

// validID reports whether id is 1-63 characters of [a-z0-9-], not starting
// with '-'. IDs appear in URIs, file names and Cedar entity IDs, so they stay
// in this small, case-free alphabet.
func validID(id string) bool {
	if len(id) == 0 || len(id) > maxIDLen || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// parsePrincipalURL reads a principal from a palyra:// URI. It accepts only
// the canonical form palyra://KIND/ID: no user, port, query, fragment, extra
// path segments or escapes.
func parsePrincipalURL(u *url.URL) (Principal, error) {
	if u == nil || u.Scheme != principalScheme {
		return Principal{}, fmt.Errorf("%w: URI is not a %s:// URI", ErrBadPrincipal, principalScheme)
	}
	p := Principal{Kind: Kind(u.Host)}
	if len(u.Path) > 1 && u.Path[0] == '/' {
		p.ID = u.Path[1:]
	}
	if err := p.Validate(); err != nil {
		return Principal{}, fmt.Errorf("URI %q: %w", u.Redacted(), err)
	}
	// Anything beyond KIND and ID (user info, port, query, fragment, escapes,
	// opaque form) makes the URI differ from its canonical spelling.
	if u.String() != p.uri().String() {
		return Principal{}, fmt.Errorf("%w: URI %q is not of the form %s://%s/ID", ErrBadPrincipal, u.Redacted(), principalScheme, p.Kind)
	}
	return p, nil
}

// PrincipalFromCert returns the principal a certificate names: its single
// palyra://KIND/ID URI SAN, whose ID must also be the subject common name.
// It does not verify the certificate; the TLS configs in this package do.
func PrincipalFromCert(cert *x509.Certificate) (Principal, error) {
	if cert == nil {
		return Principal{}, fmt.Errorf("%w: no certificate", ErrBadPrincipal)
	}
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == principalScheme {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return Principal{}, fmt.Errorf("%w: certificate %q carries no %s:// URI SAN; it was not issued by a palyra cluster CA",
			ErrBadPrincipal, cert.Subject.CommonName, principalScheme)
	case 1:
	default:
		return Principal{}, fmt.Errorf("%w: certificate %q carries %d %s:// URI SANs; exactly one is allowed",
			ErrBadPrincipal, cert.Subject.CommonName, len(found), principalScheme)
	}
	p, err := parsePrincipalURL(found[0])
	if err != nil {
		return Principal{}, err
	}
	if cert.Subject.CommonName != p.ID {
		return Principal{}, fmt.Errorf("%w: certificate common name %q does not match its principal %s",
			ErrBadPrincipal, cert.Subject.CommonName, p)
	}
	return p, nil
}
