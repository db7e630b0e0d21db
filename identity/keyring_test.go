package identity

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A keyring reads the CA InitCA wrote, takes a second one by Create, hands
// a key over (Export → Import into another keyring: the same root, and a
// certificate one signs verifies under the other's root), and Remove deletes
// the key files.
func TestKeyringHandOff(t *testing.T) {
	first, dir := newTestCA(t, "lab")
	kr, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if got := kr.Fingerprints(); !slices.Equal(got, []string{first.Fingerprint()}) {
		t.Fatalf("keyring over InitCA's dir holds %v", got)
	}
	second, err := kr.Create("lab")
	if err != nil {
		t.Fatal(err)
	}
	if second.ClusterName() != "lab" || second.Root().Subject.CommonName == first.Root().Subject.CommonName {
		t.Fatalf("new root %q for cluster %q: want cluster lab and a distinct name", second.Root().Subject.CommonName, second.ClusterName())
	}
	if st, err := os.Stat(filepath.Join(second.dir, caKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("new key file: %v %v", st, err)
	}

	// The other voter's keyring, from nothing.
	other, err := OpenKeyring(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	root, key, err := kr.Export(second.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	got, err := other.Import(root, key)
	if err != nil || got.Fingerprint() != second.Fingerprint() {
		t.Fatalf("Import: %v %v", got, err)
	}
	cred := issue(t, got, Principal{KindNode, "n-00000001"})
	if IssuingRoot(cred.Leaf, []*x509.Certificate{first.Root(), second.Root()}) != second.Root() {
		t.Fatal("a certificate signed with the imported key does not verify under the original root")
	}
	// Reopened from disk, it is still there.
	again, err := OpenKeyring(other.dir)
	if err != nil || !slices.Equal(again.Fingerprints(), []string{second.Fingerprint()}) {
		t.Fatalf("reopened keyring: %v %v", again.Fingerprints(), err)
	}
	again.Close()

	// A key of another root, or a mismatched pair, is refused.
	_, otherKey, _ := kr.Export(first.Fingerprint())
	fresh, err := OpenKeyring(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	_, err = fresh.Import(second.Root().Raw, otherKey)
	wantErr(t, err, "is not the P-256 key of root")
	if _, err := fresh.Import(second.Root().Raw, []byte("junk")); err == nil || len(fresh.Fingerprints()) != 0 {
		t.Fatalf("imported a junk key: %v", err)
	}

	for _, fp := range []string{first.Fingerprint(), second.Fingerprint()} {
		if err := kr.Remove(fp); err != nil {
			t.Fatal(err)
		}
	}
	if len(kr.Fingerprints()) != 0 {
		t.Fatalf("after Remove: %v", kr.Fingerprints())
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "*", caKeyFile))
	if top, _ := filepath.Glob(filepath.Join(dir, caKeyFile)); len(keys)+len(top) != 0 {
		t.Fatalf("key files left after Remove: %v %v", keys, top)
	}
	if _, _, err := kr.Export(first.Fingerprint()); !errors.Is(err, ErrNoCA) {
		t.Fatalf("Export after Remove: %v", err)
	}
}

// A leaf of a new root verifies for a peer that trusts only the old root
// when the cross-certificate comes with it, and not without.
func TestCrossSignBridgesARotation(t *testing.T) {
	old, dir := newTestCA(t, "lab")
	kr, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	nw, err := kr.Create("lab")
	if err != nil {
		t.Fatal(err)
	}
	cross, err := old.CrossSign(nw.Root())
	if err != nil {
		t.Fatal(err)
	}
	leaf := issue(t, nw, Principal{KindNode, "n-00000002"}).Leaf
	oldOnly := x509.NewCertPool()
	oldOnly.AddCert(old.Root())
	verify := func(inter ...*x509.Certificate) error {
		pool := x509.NewCertPool()
		for _, c := range inter {
			pool.AddCert(c)
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: oldOnly, Intermediates: pool, CurrentTime: time.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	if err := verify(); err == nil {
		t.Fatal("a new-root leaf verified under the old root alone")
	}
	if err := verify(cross, nw.Root()); err != nil {
		t.Fatalf("with the cross-certificate: %v", err)
	}
	if cross.NotAfter.After(old.Root().NotAfter) {
		t.Errorf("cross-certificate outlives the old root")
	}
}

// A relayed renewal names the relayed certificate's principal only with
// that certificate's proof; a proof by another key, a certificate of
// another CA or a revoked one is refused.
func TestVerifyRenewal(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	stranger, _ := newTestCA(t, "other")
	dev := issue(t, ca, Principal{KindDevice, "d-00000003"})
	chain := [][]byte{dev.Leaf.Raw}
	_, csr, _ := NewKeyAndCSR(dev.Principal)
	proof, err := RenewalProof(dev.Key, csr)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root())
	if p, err := VerifyRenewal(chain, roots, csr, proof, nil); err != nil || p != dev.Principal {
		t.Fatalf("valid relayed renewal: %v %v", p, err)
	}
	other := issue(t, ca, Principal{KindDevice, "d-00000004"})
	forged, _ := RenewalProof(other.Key, csr)
	_, err = VerifyRenewal(chain, roots, csr, forged, nil)
	wantErr(t, err, "proof")
	_, otherCSR, _ := NewKeyAndCSR(dev.Principal)
	_, err = VerifyRenewal(chain, roots, otherCSR, proof, nil)
	wantErr(t, err, "proof")
	foreign := issue(t, stranger, Principal{KindDevice, "d-00000005"})
	fproof, _ := RenewalProof(foreign.Key, csr)
	_, err = VerifyRenewal([][]byte{foreign.Leaf.Raw}, roots, csr, fproof, nil)
	wantErr(t, err, "not signed by this cluster's CA")
	_, err = VerifyRenewal(chain, roots, csr, proof, func(Principal, *x509.Certificate) error { return errors.New("revoked") })
	wantErr(t, err, "revoked")
}
