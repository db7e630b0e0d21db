package identity

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestInitLoadRoundTrip(t *testing.T) {
	ca, dir := newTestCA(t, "home-lab")
	root := ca.Root()
	if !root.IsCA || root.CheckSignatureFrom(root) != nil || !isP256(root.PublicKey) {
		t.Fatalf("root is not a self-signed P-256 CA: IsCA=%v", root.IsCA)
	}
	if life := root.NotAfter.Sub(time.Now()); life < 9*365*24*time.Hour || life > 11*365*24*time.Hour {
		t.Errorf("root valid for %s more, want about 10 years", life)
	}
	sum := sha256.Sum256(root.Raw)
	if ca.Fingerprint() != hex.EncodeToString(sum[:]) {
		t.Errorf("Fingerprint = %q, want lower-case hex sha256 of the root DER", ca.Fingerprint())
	}
	if ca.ClusterName() != "home-lab" {
		t.Errorf("ClusterName = %q", ca.ClusterName())
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, caKeyFile): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %#o, want %#o", path, st.Mode().Perm(), want)
		}
	}

	again, err := LoadCA(dir)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	defer again.Close()
	if !bytes.Equal(again.Root().Raw, root.Raw) || again.Fingerprint() != ca.Fingerprint() || again.ClusterName() != "home-lab" {
		t.Error("LoadCA returned a different root, fingerprint or name")
	}
	// The reloaded CA issues certificates that verify under the original root.
	cred := issue(t, again, Principal{KindNode, "n-1"})
	if err := cred.check(); err != nil {
		t.Errorf("certificate from reloaded CA: %v", err)
	}
}

func TestInitCARefusesExistingCA(t *testing.T) {
	_, dir := newTestCA(t, "one")
	_, err := InitCA(dir, "two")
	if !errors.Is(err, ErrCAExists) {
		t.Fatalf("second InitCA: err = %v, want ErrCAExists", err)
	}
	wantErr(t, err, dir)
}

func TestInitCARejectsBadName(t *testing.T) {
	for _, name := range []string{"", "a\nb", string(bytes.Repeat([]byte("x"), 65))} {
		if _, err := InitCA(t.TempDir(), name); err == nil {
			t.Errorf("InitCA(%q) succeeded, want an error", name)
		}
	}
}

func TestLoadCAMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nothing-here")
	_, err := LoadCA(dir)
	if !errors.Is(err, ErrNoCA) {
		t.Fatalf("err = %v, want ErrNoCA", err)
	}
	wantErr(t, err, dir, caCertFile)
}

func TestLoadCADamaged(t *testing.T) {
	other, otherDir := newTestCA(t, "other")
	_ = other
	otherKey, err := os.ReadFile(filepath.Join(otherDir, caKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		damage func(dir string) error
		want   []string
		is     error
	}{
		{"garbage ca.crt", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, caCertFile), []byte("not a certificate"), 0o644)
		}, []string{caCertFile, "damaged"}, nil},
		{"garbage ca.key", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, caKeyFile), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
		}, []string{caKeyFile, "damaged"}, nil},
		{"key of another CA", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, caKeyFile), otherKey, 0o600)
		}, []string{"does not match"}, nil},
		{"ca.key readable by others", func(dir string) error {
			return os.Chmod(filepath.Join(dir, caKeyFile), 0o644)
		}, []string{"chmod 600"}, ErrInsecureKeyFile},
		{"ca.key missing", func(dir string) error {
			return os.Remove(filepath.Join(dir, caKeyFile))
		}, []string{caKeyFile, "missing"}, ErrNoCA},
		{"leaf instead of root", func(dir string) error {
			cert, _ := selfSigned(t, "x")
			return os.WriteFile(filepath.Join(dir, caCertFile), encodeCertsPEM(cert), 0o644)
		}, []string{"not a self-signed CA"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ca, dir := newTestCA(t, "lab")
			ca.Close()
			if err := c.damage(dir); err != nil {
				t.Fatal(err)
			}
			_, err := LoadCA(dir)
			wantErr(t, err, c.want...)
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("err = %v, want errors.Is %v", err, c.is)
			}
		})
	}
}

func TestSignIssuesLeafForPrincipal(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root())
	for _, p := range []Principal{{KindNode, NewID(KindNode)}, {KindDevice, NewID(KindDevice)}} {
		t.Run(string(p.Kind), func(t *testing.T) {
			key, csr, err := NewKeyAndCSR(p)
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			chain, err := ca.Sign(context.Background(), csr, p, 0)
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if len(chain) != 1 {
				t.Errorf("chain has %d certificates, want the leaf only (root is not sent)", len(chain))
			}
			leaf := chain[0]
			if !key.Public().(*ecdsa.PublicKey).Equal(leaf.PublicKey) {
				t.Error("leaf public key differs from the CSR's: the caller's key must be certified")
			}
			usage := x509.ExtKeyUsageClientAuth
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("leaf does not chain to the root: %v", err)
			}
			if got, err := PrincipalFromCert(leaf); err != nil || got != p {
				t.Errorf("PrincipalFromCert = %v, %v; want %v", got, err, p)
			}
			if leaf.Subject.CommonName != p.ID || !slices.Equal(leaf.Subject.Organization, []string{"lab"}) {
				t.Errorf("subject = %v", leaf.Subject)
			}
			if len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 || leaf.IsCA {
				t.Errorf("leaf carries extra names or is a CA: %v %v %v", leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
			}
			wantEKU := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
			if p.Kind == KindNode {
				wantEKU = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			}
			if !slices.Equal(leaf.ExtKeyUsage, wantEKU) {
				t.Errorf("ExtKeyUsage = %v, want %v", leaf.ExtKeyUsage, wantEKU)
			}
			if !leaf.NotBefore.Before(before.Add(-59 * time.Second)) {
				t.Errorf("NotBefore %v is not backdated a minute from %v", leaf.NotBefore, before)
			}
			if got := leaf.NotAfter.Sub(leaf.NotBefore); got != defaultCertTTL+certBackdate {
				t.Errorf("lifetime %s, want default 24h plus 1m backdate", got)
			}
		})
	}
}

func TestSignTTL(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	p := Principal{KindDevice, "d-1"}
	_, csr, err := NewKeyAndCSR(p)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ca.Sign(context.Background(), csr, p, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := chain[0].NotAfter.Sub(chain[0].NotBefore); got != 2*time.Hour+certBackdate {
		t.Errorf("lifetime %s, want 2h1m", got)
	}
	for _, ttl := range []time.Duration{time.Second, 91 * 24 * time.Hour} {
		_, err := ca.Sign(context.Background(), csr, p, ttl)
		wantErr(t, err, "lifetime")
	}
}

func TestSignRefusesBadCSR(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	p := Principal{KindDevice, "d-1"}
	_, good, err := NewKeyAndCSR(p)
	if err != nil {
		t.Fatal(err)
	}
	badSig := bytes.Clone(good)
	badSig[len(badSig)-1] ^= 0xff // last byte of the signature

	csrWith := func(key any, tmpl *x509.CertificateRequest) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	other, _ := url.Parse("palyra://node/n-1")
	cases := map[string]struct {
		csr  []byte
		want string
	}{
		"bad signature":     {badSig, "signature"},
		"not DER":           {[]byte("hello"), "not a DER CSR"},
		"P-384 key":         {csrWith(p384, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "d-1"}}), "P-256"},
		"other common name": {csrWith(p256, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "n-1"}}), `names "n-1"`},
		"other URI":         {csrWith(p256, &x509.CertificateRequest{URIs: []*url.URL{other}}), "palyra://node/n-1"},
		"DNS name":          {csrWith(p256, &x509.CertificateRequest{DNSNames: []string{"evil.example"}}), "DNS"},
	}
	for name, c := range cases {
		_, err := ca.Sign(context.Background(), c.csr, p, 0)
		if !errors.Is(err, ErrBadCSR) {
			t.Errorf("%s: err = %v, want ErrBadCSR", name, err)
			continue
		}
		wantErr(t, err, c.want)
	}
	// A CSR without names is fine: the CA names the leaf.
	if _, err := ca.Sign(context.Background(), csrWith(p256, &x509.CertificateRequest{}), p, 0); err != nil {
		t.Errorf("CSR without names: %v", err)
	}
	if _, err := ca.Sign(context.Background(), good, Principal{"admin", "d-1"}, 0); !errors.Is(err, ErrBadPrincipal) {
		t.Errorf("bad principal: err = %v, want ErrBadPrincipal", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ca.Sign(ctx, good, p, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
}

func TestSignConcurrent(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	var wg sync.WaitGroup
	serials := make([]string, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() {
			p := Principal{KindNode, NewID(KindNode)}
			_, csr, err := NewKeyAndCSR(p)
			if err == nil {
				var chain []*x509.Certificate
				chain, err = ca.Sign(context.Background(), csr, p, 0)
				if err == nil {
					serials[i] = chain[0].SerialNumber.String()
				}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Sign %d: %v", i, err)
		}
	}
	slices.Sort(serials)
	if len(slices.Compact(serials)) != 8 {
		t.Errorf("serials not unique: %v", serials)
	}
}
