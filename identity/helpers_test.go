package identity

import (
	"context"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newTestCA creates a CA in a fresh temporary directory and closes it when
// the test ends.
func newTestCA(t *testing.T, name string) (*CA, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := InitCA(dir, name)
	if err != nil {
		t.Fatalf("InitCA: %v", err)
	}
	t.Cleanup(func() { _ = ca.Close() })
	return ca, dir
}

// issue makes a credential for p the way a joiner does: key and CSR locally,
// signature by the CA.
func issue(t *testing.T, ca *CA, p Principal) *Credential {
	t.Helper()
	key, csr, err := NewKeyAndCSR(p)
	if err != nil {
		t.Fatalf("NewKeyAndCSR(%s): %v", p, err)
	}
	chain, err := ca.Sign(context.Background(), csr, p, time.Hour)
	if err != nil {
		t.Fatalf("Sign(%s): %v", p, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Root())
	return &Credential{Principal: p, Leaf: chain[0], Chain: chain[1:], Key: key, Roots: pool, RootCerts: []*x509.Certificate{ca.Root()}}
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
