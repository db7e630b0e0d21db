package identity

import (
	"context"
	"crypto/x509"
	"sync"
	"testing"
	"time"

	"github.com/smallstep/certificates/db"
)

// recordingDB is an AuthDB that remembers used tokens in a map and records
// whether it was shut down, standing in for the replicated store.
type recordingDB struct {
	db.AuthDB // the rest of the interface: smallstep's in-memory default
	mu        sync.Mutex
	used      map[string]bool
	shutdown  bool
}

func newRecordingDB(t *testing.T) *recordingDB {
	t.Helper()
	base, err := db.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &recordingDB{AuthDB: base, used: map[string]bool{}}
}

func (r *recordingDB) UseToken(id, _ string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used[id] {
		return false, nil
	}
	r.used[id] = true
	return true, nil
}

func (r *recordingDB) Shutdown() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shutdown = true
	return nil
}

func csrFor(t *testing.T, p Principal) *x509.CertificateRequest {
	t.Helper()
	_, der, err := NewKeyAndCSR(p)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func TestWithAuthDBRecordsOneTimeTokens(t *testing.T) {
	_, dir := newTestCA(t, "lab")
	rec := newRecordingDB(t)
	ca, err := LoadCA(dir, WithAuthDB(rec))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Principal{{KindNode, "n-1"}, {KindDevice, "d-1"}} {
		_, csr, err := NewKeyAndCSR(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ca.Sign(context.Background(), csr, p, 0); err != nil {
			t.Fatalf("Sign: %v", err)
		}
	}
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.used) != 2 {
		t.Errorf("AuthDB saw %d used tokens, want 2 (one per Sign)", len(rec.used))
	}
	if rec.shutdown {
		t.Error("CA.Close shut down a database it does not own")
	}
}

// TestTokenIsOneTimeAcrossCAInstances: two CA instances on the same root
// (e.g. old and new leader) sharing one AuthDB accept each other's tokens,
// and a token used once is refused everywhere.
func TestTokenIsOneTimeAcrossCAInstances(t *testing.T) {
	_, dir := newTestCA(t, "lab")
	shared := newRecordingDB(t)
	a, err := LoadCA(dir, WithAuthDB(shared))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := LoadCA(dir, WithAuthDB(shared))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	p := Principal{KindDevice, "d-1"}
	token, err := a.step.mintToken(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.step.signWithToken(context.Background(), token, csrFor(t, p), p, time.Hour); err != nil {
		t.Fatalf("token minted by one instance refused by another: %v", err)
	}
	_, err = a.step.signWithToken(context.Background(), token, csrFor(t, p), p, time.Hour)
	wantErr(t, err, "token already used")

	// An instance started after the token was minted still accepts it
	// (DisableIssuedAtCheck). With its own in-memory store it does not know
	// the token was used: the reason the cluster passes a replicated AuthDB.
	c, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.step.signWithToken(context.Background(), token, csrFor(t, p), p, time.Hour); err != nil {
		t.Fatalf("separate in-memory store: %v", err)
	}
}

func TestTokenForOtherCARefused(t *testing.T) {
	a, _ := newTestCA(t, "a")
	b, _ := newTestCA(t, "b")
	p := Principal{KindNode, "n-1"}
	token, err := a.step.mintToken(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.step.signWithToken(context.Background(), token, csrFor(t, p), p, time.Hour)
	wantErr(t, err, "authorize")
}
