package node

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/node/blob"
)

type refSet map[string]bool

func (r refSet) BlobReferenced(h string) bool { return r[h] }

// Collection deletes only blobs that are both unreferenced and older than
// the grace; a referenced or young blob stays.
func TestCollectBlobs(t *testing.T) {
	dir := t.TempDir()
	s, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := s.Put([]byte("referenced"))
	young, _ := s.Put([]byte("young"))
	old, _ := s.Put([]byte("old and unreferenced"))
	past := time.Now().Add(-time.Hour)
	for _, h := range []string{kept, old} {
		if err := os.Chtimes(filepath.Join(dir, "sha256", h[:2], h), past, past); err != nil {
			t.Fatal(err)
		}
	}
	n, size, err := collectBlobs(s, refSet{kept: true}, time.Now(), 10*time.Minute)
	if err != nil || n != 1 || size != int64(len("old and unreferenced")) {
		t.Fatalf("collected %d (%d bytes), err %v; want the one old unreferenced blob", n, size, err)
	}
	if !s.Has(kept) || !s.Has(young) || s.Has(old) {
		t.Fatalf("after collection: kept %v young %v old %v", s.Has(kept), s.Has(young), s.Has(old))
	}
	// Storing a blob again renews its age.
	if err := os.Chtimes(filepath.Join(dir, "sha256", young[:2], young), past, past); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put([]byte("young")); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := collectBlobs(s, refSet{kept: true}, time.Now(), 10*time.Minute); n != 0 || !s.Has(young) {
		t.Fatal("a blob stored again just now was collected")
	}
}
