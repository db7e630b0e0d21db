package identity

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCredentialSaveLoadRoundTrip(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	cred := issue(t, ca, Principal{KindDevice, "d-1"})
	dir := filepath.Join(t.TempDir(), "device")
	if err := SaveCredential(dir, cred); err != nil {
		t.Fatalf("SaveCredential: %v", err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, credKeyFile): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %#o, want %#o", path, st.Mode().Perm(), want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("credential dir holds %d entries, want cert.pem, key.pem, ca.pem only", len(entries))
	}

	got, err := LoadCredential(dir)
	if err != nil {
		t.Fatalf("LoadCredential: %v", err)
	}
	if got.Principal != cred.Principal {
		t.Errorf("Principal = %v, want %v", got.Principal, cred.Principal)
	}
	if !bytes.Equal(got.Leaf.Raw, cred.Leaf.Raw) || len(got.Chain) != len(cred.Chain) {
		t.Error("leaf or chain differ after round trip")
	}
	if !got.Key.Public().(*ecdsa.PublicKey).Equal(cred.Key.Public()) {
		t.Error("key differs after round trip")
	}
	if len(got.RootCerts) != 1 || !bytes.Equal(got.RootCerts[0].Raw, ca.Root().Raw) {
		t.Error("RootCerts differ after round trip")
	}
	if _, err := got.Leaf.Verify(x509.VerifyOptions{Roots: got.Roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("loaded Roots do not verify the leaf: %v", err)
	}
	tc := got.TLSCertificate()
	if len(tc.Certificate) != 1 || tc.Leaf != got.Leaf || tc.PrivateKey != got.Key {
		t.Errorf("TLSCertificate = %d certs, leaf set %v", len(tc.Certificate), tc.Leaf != nil)
	}

	// Saving again (a renewal) replaces the credential.
	renewed := issue(t, ca, cred.Principal)
	if err := SaveCredential(dir, renewed); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadCredential(dir); err != nil || !bytes.Equal(got.Leaf.Raw, renewed.Leaf.Raw) {
		t.Fatalf("after second save: %v", err)
	}
}

func TestLoadCredentialMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	_, err := LoadCredential(dir)
	if !errors.Is(err, ErrNoCredential) {
		t.Fatalf("err = %v, want ErrNoCredential", err)
	}
	want := "no credential in " + dir + "; start a node there or pair this device with 'palyra device pair'"
	if err.Error() != want {
		t.Errorf("err = %q\nwant  %q", err, want)
	}
}

func TestLoadCredentialChecksKeyFile(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	dir := t.TempDir()
	if err := SaveCredential(dir, issue(t, ca, Principal{KindNode, "n-1"})); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, credKeyFile)
	for _, mode := range []os.FileMode{0o640, 0o604} {
		if err := os.Chmod(keyPath, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadCredential(dir)
		if !errors.Is(err, ErrInsecureKeyFile) {
			t.Fatalf("mode %#o: err = %v, want ErrInsecureKeyFile", mode, err)
		}
		wantErr(t, err, "chmod 600 "+keyPath)
	}
	if err := os.Chmod(keyPath, 0o600); err != nil {
		t.Fatal(err)
	}

	// A key that is not the certificate's is refused.
	other := issue(t, ca, Principal{KindNode, "n-1"})
	pemKey, err := encodeKeyPEM(other.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadCredential(dir)
	wantErr(t, err, "does not match")
}

func TestLoadCredentialRefusesForeignCert(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	foreign, _ := newTestCA(t, "foreign")
	cred := issue(t, foreign, Principal{KindNode, "n-1"})
	cred.RootCerts = []*x509.Certificate{ca.Root()}
	cred.Roots = nil
	err := SaveCredential(t.TempDir(), cred)
	wantErr(t, err, "not issued by the cluster CA")
}

func TestSaveCredentialRefusesIncomplete(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	cred := issue(t, ca, Principal{KindNode, "n-1"})
	noRoots := *cred
	noRoots.RootCerts = nil
	wantErr(t, SaveCredential(t.TempDir(), &noRoots), "RootCerts")
	wrongKey := *cred
	wrongKey.Key = issue(t, ca, Principal{KindNode, "n-1"}).Key
	wantErr(t, SaveCredential(t.TempDir(), &wrongKey), "does not match")
	wrongName := *cred
	wrongName.Principal = Principal{KindNode, "n-2"}
	wantErr(t, SaveCredential(t.TempDir(), &wrongName), "names node:n-1")
	if err := SaveCredential(t.TempDir(), nil); err == nil {
		t.Error("SaveCredential(nil) succeeded")
	}
}

// stagedFiles encodes cred as SaveCredential would.
func stagedFiles(t *testing.T, cred *Credential) map[string][]byte {
	t.Helper()
	keyPEM, err := encodeKeyPEM(cred.Key)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		credCertFile: encodeCertsPEM(cred.Leaf),
		credKeyFile:  keyPEM,
		credCAFile:   encodeCertsPEM(cred.RootCerts...),
	}
}

// TestInterruptedSave simulates crashes at each stage of SaveCredential and
// checks that LoadCredential sees one whole credential, old or new.
func TestInterruptedSave(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	p := Principal{KindNode, "n-1"}
	old, next := issue(t, ca, p), issue(t, ca, p)

	t.Run("crash before commit keeps the old credential", func(t *testing.T) {
		dir := t.TempDir()
		if err := SaveCredential(dir, old); err != nil {
			t.Fatal(err)
		}
		if err := stageCredential(dir, stagedFiles(t, next)); err != nil {
			t.Fatal(err)
		}
		// The marker is the commit point: without it the save never happened.
		if err := os.Remove(filepath.Join(dir, credPendingMarker)); err != nil {
			t.Fatal(err)
		}
		got, err := LoadCredential(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Leaf.Raw, old.Leaf.Raw) {
			t.Error("uncommitted save replaced the credential")
		}
		// A reader leaves uncommitted staged files alone (they may be
		// another process's save in progress); the next save discards them.
		if err := SaveCredential(dir, next); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, credPendingMarker)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("marker left behind: %v", err)
		}
		if got, _ := LoadCredential(dir); !bytes.Equal(got.Leaf.Raw, next.Leaf.Raw) {
			t.Error("next save did not take effect")
		}
	})

	// A reader polling while another process saves must not destroy that
	// save (found by the cluster benchmark: the operator credential of a
	// fresh node vanished when read between staging and commit).
	t.Run("load between staging and commit leaves the save intact", func(t *testing.T) {
		dir := t.TempDir()
		files := stagedFiles(t, next)
		for _, f := range credFileModes {
			if err := writeFileAtomic(filepath.Join(dir, f.name+stagedSuffix), files[f.name], f.mode); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := LoadCredential(dir); !errors.Is(err, ErrNoCredential) {
			t.Fatalf("load of a save in progress: %v, want ErrNoCredential", err)
		}
		// The writer now commits, as SaveCredential would.
		if err := writeFileAtomic(filepath.Join(dir, credPendingMarker), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := commitCredential(dir); err != nil {
			t.Fatal(err)
		}
		got, err := LoadCredential(dir)
		if err != nil || !bytes.Equal(got.Leaf.Raw, next.Leaf.Raw) {
			t.Fatalf("save destroyed by a concurrent load: %v", err)
		}
	})

	t.Run("crash mid-commit rolls forward", func(t *testing.T) {
		dir := t.TempDir()
		if err := SaveCredential(dir, old); err != nil {
			t.Fatal(err)
		}
		if err := stageCredential(dir, stagedFiles(t, next)); err != nil {
			t.Fatal(err)
		}
		// Only the first file was moved into place when the "crash" hit.
		if err := os.Rename(filepath.Join(dir, credCertFile+stagedSuffix), filepath.Join(dir, credCertFile)); err != nil {
			t.Fatal(err)
		}
		got, err := LoadCredential(dir)
		if err != nil {
			t.Fatalf("LoadCredential after interrupted commit: %v", err)
		}
		if !bytes.Equal(got.Leaf.Raw, next.Leaf.Raw) {
			t.Error("committed save was not completed")
		}
		if _, err := os.Stat(filepath.Join(dir, credPendingMarker)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("marker left behind: %v", err)
		}
	})

	t.Run("first save interrupted after commit", func(t *testing.T) {
		dir := t.TempDir()
		if err := stageCredential(dir, stagedFiles(t, next)); err != nil {
			t.Fatal(err)
		}
		got, err := LoadCredential(dir)
		if err != nil || !bytes.Equal(got.Leaf.Raw, next.Leaf.Raw) {
			t.Fatalf("LoadCredential = %v", err)
		}
	})
}

// A reader never gets an error from a save in progress: while one writer
// keeps replacing a credential (as a node renewing the local operator's,
// or another palyra command renewing a device's), every load returns one
// of the saved credentials whole.
func TestLoadCredentialDuringSaves(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	dir := filepath.Join(t.TempDir(), "cred")
	creds := []*Credential{issue(t, ca, Principal{KindDevice, "d-00000001"}), issue(t, ca, Principal{KindDevice, "d-00000001"})}
	if err := SaveCredential(dir, creds[0]); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	saved := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				saved <- nil
				return
			default:
			}
			if err := SaveCredential(dir, creds[i%2]); err != nil {
				saved <- err
				return
			}
		}
	}()
	// As many loads as fit in two seconds (a torn read, without the
	// retry, shows up every few thousand).
	for i, end := 0, time.Now().Add(2*time.Second); i < 20000 && time.Now().Before(end); i++ {
		c, err := LoadCredential(dir)
		if err != nil {
			close(stop)
			t.Fatalf("load %d during saves: %v", i, err)
		}
		if !c.Leaf.Equal(creds[0].Leaf) && !c.Leaf.Equal(creds[1].Leaf) {
			t.Fatalf("load %d returned a certificate never saved", i)
		}
	}
	close(stop)
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
}
