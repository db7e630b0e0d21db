package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"regexp"
	"testing"
	"time"
)

func TestPrincipalString(t *testing.T) {
	if got := (Principal{KindNode, "n-1"}).String(); got != "node:n-1" {
		t.Errorf("node String = %q", got)
	}
	if got := (Principal{KindDevice, "d-1"}).String(); got != "device:d-1" {
		t.Errorf("device String = %q", got)
	}
}

func TestNewID(t *testing.T) {
	cases := map[Kind]*regexp.Regexp{
		KindNode:   regexp.MustCompile(`^n-[0-9a-f]{8}$`),
		KindDevice: regexp.MustCompile(`^d-[0-9a-f]{8}$`),
		Kind("x"):  regexp.MustCompile(`^x-[0-9a-f]{8}$`),
	}
	for kind, re := range cases {
		seen := map[string]bool{}
		for range 50 {
			id := NewID(kind)
			if !re.MatchString(id) || !validID(id) {
				t.Fatalf("NewID(%q) = %q, want match %s and a valid ID", kind, id, re)
			}
			seen[id] = true
		}
		if len(seen) < 49 { // 50 draws of 32 bits: a repeat is ~3e-7 likely
			t.Errorf("NewID(%q) produced only %d distinct IDs in 50 draws", kind, len(seen))
		}
	}
}

func TestPrincipalValidate(t *testing.T) {
	good := []Principal{{KindNode, "n-3f9a1c2b"}, {KindDevice, "laptop-7"}, {KindNode, "a"}}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%v.Validate() = %v, want nil", p, err)
		}
	}
	bad := []Principal{
		{"admin", "x"}, {"", "x"}, {KindNode, ""}, {KindNode, "-x"}, {KindNode, "N-1"},
		{KindNode, "a/b"}, {KindNode, "a b"}, {KindNode, "a.b"}, {KindNode, string(make([]byte, 64))},
	}
	for _, p := range bad {
		if err := p.Validate(); !errors.Is(err, ErrBadPrincipal) {
			t.Errorf("%q.Validate() = %v, want ErrBadPrincipal", p, err)
		}
	}
}

func TestParsePrincipalURL(t *testing.T) {
	ok := map[string]Principal{
		"palyra://node/n-3f9a1c2b": {KindNode, "n-3f9a1c2b"},
		"palyra://device/d-00":     {KindDevice, "d-00"},
	}
	for s, want := range ok {
		u, _ := url.Parse(s)
		got, err := parsePrincipalURL(u)
		if err != nil || got != want {
			t.Errorf("parse %q = %v, %v; want %v", s, got, err, want)
		}
	}
	bad := []string{
		"palyra://node/", "palyra://node", "palyra://admin/x", "palyra://node/a/b",
		"palyra://node/x?y", "palyra://node/x#y", "palyra://u@node/x", "palyra://node:1/x",
		"palyra://node/X", "palyra://node/%61", "https://node/x", "palyra:node/x",
		"palyra:///node/x", "palyra://NODE/x",
	}
	for _, s := range bad {
		u, err := url.Parse(s)
		if err != nil {
			continue
		}
		if p, err := parsePrincipalURL(u); err == nil {
			t.Errorf("parse %q = %v, want an error", s, p)
		}
	}
	if _, err := parsePrincipalURL(nil); err == nil {
		t.Error("parse nil URL: want an error")
	}
}

// FuzzParsePrincipalURL checks that the URI parser never panics and accepts
// only canonical URIs that round-trip to a valid principal.
func FuzzParsePrincipalURL(f *testing.F) {
	for _, s := range []string{
		"palyra://node/n-3f9a1c2b", "palyra://device/d-1", "palyra://node/a/b",
		"palyra://node/%2e", "PALYRA://node/x", "palyra://node/x?", "palyra://[::1]/x", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		p, err := parsePrincipalURL(u)
		if err != nil {
			return
		}
		if p.Validate() != nil {
			t.Fatalf("accepted %q as invalid principal %q", s, p)
		}
		if got := p.uri().String(); got != u.String() {
			t.Fatalf("accepted %q (%q) but the principal spells it %q", s, u.String(), got)
		}
	})
}

// selfSigned returns a self-signed certificate with the given CN and URIs.
func selfSigned(t *testing.T, cn string, uris ...string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func TestPrincipalFromCert(t *testing.T) {
	cert, _ := selfSigned(t, "d-1", "palyra://device/d-1", "https://example.com/other")
	if p, err := PrincipalFromCert(cert); err != nil || p != (Principal{KindDevice, "d-1"}) {
		t.Fatalf("PrincipalFromCert = %v, %v", p, err)
	}
	cases := []struct {
		name string
		cn   string
		uris []string
		want string
	}{
		{"no URI", "d-1", nil, "no palyra:// URI SAN"},
		{"two URIs", "d-1", []string{"palyra://device/d-1", "palyra://node/d-1"}, "exactly one"},
		{"CN mismatch", "d-2", []string{"palyra://device/d-1"}, "does not match"},
		{"bad kind", "d-1", []string{"palyra://admin/d-1"}, "kind"},
	}
	for _, c := range cases {
		cert, _ := selfSigned(t, c.cn, c.uris...)
		_, err := PrincipalFromCert(cert)
		if !errors.Is(err, ErrBadPrincipal) {
			t.Errorf("%s: err = %v, want ErrBadPrincipal", c.name, err)
		}
		wantErr(t, err, c.want)
	}
	if _, err := PrincipalFromCert(nil); !errors.Is(err, ErrBadPrincipal) {
		t.Errorf("nil cert: err = %v", err)
	}
}
