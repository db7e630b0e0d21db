package pairing

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/identity"
)

// newCA creates a cluster CA in a temporary directory.
func newCA(t *testing.T, name string) *identity.CA {
	t.Helper()
	ca, err := identity.InitCA(filepath.Join(t.TempDir(), "ca"), name)
	if err != nil {
		t.Fatalf("InitCA: %v", err)
	}
	t.Cleanup(func() { _ = ca.Close() })
	return ca
}

// issue makes a credential of kind under ca the way a joiner does: key and
// CSR locally, signature by the CA.
func issue(t *testing.T, ca *identity.CA, kind identity.Kind) *identity.Credential {
	t.Helper()
	p := identity.Principal{Kind: kind, ID: identity.NewID(kind)}
	key, csr, err := identity.NewKeyAndCSR(p)
	if err != nil {
		t.Fatalf("NewKeyAndCSR: %v", err)
	}
	chain, err := ca.Sign(context.Background(), csr, p, time.Hour)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Root())
	return &identity.Credential{Principal: p, Leaf: chain[0], Chain: chain[1:], Key: key, Roots: pool, RootCerts: []*x509.Certificate{ca.Root()}}
}

// mustNew makes a code or fails the test.
func mustNew(t testing.TB, kind identity.Kind, fp string) Code {
	t.Helper()
	c, err := New(kind, fp)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// wantErr fails unless err is non-nil and its message contains every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

// testFP is a fixed CA fingerprint for tests that need no real CA.
const testFP = "3f9a1c2b3f9a1c2b3f9a1c2b3f9a1c2b3f9a1c2b3f9a1c2b3f9a1c2b3f9a1c2b"

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }
