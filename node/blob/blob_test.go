package blob

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPutGetVerify(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Put([]byte("hello"))
	if err != nil || h != Hash([]byte("hello")) || !s.Has(h) {
		t.Fatalf("put: %s %v", h, err)
	}
	if h2, _ := s.Put([]byte("hello")); h2 != h {
		t.Fatal("second put changed the name")
	}
	if got, err := s.Get(h); err != nil || string(got) != "hello" {
		t.Fatalf("get: %q %v", got, err)
	}
	if err := os.WriteFile(s.path(h), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(h); !errors.Is(err, ErrNotFound) {
		t.Fatalf("corrupt blob served: %v", err)
	}
	if s.Has(h) {
		t.Fatal("corrupt blob kept")
	}
	if _, err := s.Get("../../etc/passwd"); err == nil {
		t.Fatal("path traversal accepted")
	}
	if _, err := s.Get(Hash([]byte("absent"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent: %v", err)
	}
}

// A blob's durability rests on directory syncs: the shard directory after
// the rename, and its parent when the shard is new. Both are made, and a
// failed one fails the store.
func TestPutSyncsDirectoriesAndReportsFailure(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var synced []string
	s.syncDir = func(dir string) error {
		synced = append(synced, dir)
		return fsyncDir(dir)
	}
	h, err := s.Put([]byte("durable"))
	if err != nil {
		t.Fatal(err)
	}
	shard := filepath.Dir(s.path(h))
	want := []string{filepath.Dir(shard), shard}
	if !slices.Equal(synced, want) {
		t.Fatalf("synced %v, want %v (the new shard's parent, then the shard)", synced, want)
	}

	// A second blob in the same shard syncs only the shard.
	synced = nil
	for i := 0; ; i++ {
		data := []byte(fmt.Sprintf("same-shard-%d", i))
		if Hash(data)[:2] == h[:2] {
			if _, err = s.Put(data); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if !slices.Equal(synced, []string{shard}) {
		t.Fatalf("second put in %s synced %v", shard, synced)
	}

	// A failed sync is a failed store, in either place.
	boom := errors.New("disk says no")
	for _, failOn := range []string{"parent", "shard"} {
		s.syncDir = func(dir string) error {
			if (failOn == "parent") == (filepath.Base(dir) == "sha256") {
				return boom
			}
			return nil
		}
		data := []byte("fail-" + failOn)
		for i := 0; failOn == "parent" && dirExists(filepath.Dir(s.path(Hash(data)))); i++ {
			data = []byte(fmt.Sprintf("fail-parent-%d", i)) // a blob in a new shard
		}
		if got, err := s.Put(data); !errors.Is(err, boom) {
			t.Fatalf("sync failure on the %s: put returned %q, %v", failOn, got, err)
		}
		if failOn == "parent" {
			if _, err := os.Stat(filepath.Dir(s.path(Hash(data)))); err == nil {
				t.Fatal("a shard whose creation was not synced is kept (the next put would not sync it)")
			}
		}
	}
}

func dirExists(dir string) bool {
	_, err := os.Stat(dir)
	return err == nil
}

// storeWithOldBlob is a store holding one blob stored an hour ago.
func storeWithOldBlob(t *testing.T) (*Store, string) {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Put([]byte("module"))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(s.path(h), old, old); err != nil {
		t.Fatal(err)
	}
	return s, h
}

// Renew reports a held blob and renews an old one's age, so collection's
// grace counts from the newest use (a submit by hash only looked the blob
// up, and a module in use looked as old as its first store).
func TestRenew(t *testing.T) {
	s, h := storeWithOldBlob(t)
	if !s.Renew(h) {
		t.Fatal("Renew says a held blob is not held")
	}
	fi, err := os.Stat(s.path(h))
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("Renew left the blob's age at %s, want now", fi.ModTime())
	}
	if s.Renew(Hash([]byte("absent"))) || s.Renew("../x") {
		t.Error("Renew says an absent or invalid name is held")
	}
}

// SweepTemp removes the temp files a killed process left mid-store, and
// nothing else.
func TestSweepTemp(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Put([]byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(s.path(h))
	for _, name := range []string{".tmp-123", ".tmp-456"} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, 1000), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.SweepTemp()
	if err != nil || n != 2 {
		t.Fatalf("SweepTemp: %d %v, want 2 removed", n, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != h {
		t.Errorf("after the sweep the shard holds %v, want only %s", entries, h)
	}
	if got, err := s.Get(h); err != nil || string(got) != "kept" {
		t.Errorf("the blob after the sweep: %q %v", got, err)
	}
}

// DeleteIfOlder removes a blob last stored before the cut-off, and keeps
// one renewed since: collection's walk and its removal are apart, and a
// blob a commit is about to name must survive the gap.
func TestDeleteIfOlder(t *testing.T) {
	s, h := storeWithOldBlob(t)
	old := time.Now().Add(-time.Hour)
	cutoff := time.Now().Add(-10 * time.Minute) // the walk saw it as old
	if !s.Renew(h) {                            // named again meanwhile
		t.Fatal("Renew: not held")
	}
	if deleted, err := s.DeleteIfOlder(h, cutoff); err != nil || deleted || !s.Has(h) {
		t.Fatalf("a blob renewed after the walk: deleted %v, err %v, held %v", deleted, err, s.Has(h))
	}
	if err := os.Chtimes(s.path(h), old, old); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.DeleteIfOlder(h, cutoff); err != nil || !deleted || s.Has(h) {
		t.Fatalf("an old blob: deleted %v, err %v, held %v", deleted, err, s.Has(h))
	}
	if deleted, err := s.DeleteIfOlder(h, cutoff); err != nil || deleted {
		t.Fatalf("an absent blob: deleted %v, err %v", deleted, err)
	}
}

// Renew answers from what it last saw for a second, so every way a blob
// leaves the store must be seen by it at once: a removed blob is not
// held, whichever path removed it.
func TestRenewAfterRemoval(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(s *Store, h string)
	}{
		{"Delete", func(s *Store, h string) {
			if err := s.Delete(h); err != nil {
				t.Fatal(err)
			}
		}},
		{"DeleteIfOlder", func(s *Store, h string) {
			if deleted, err := s.DeleteIfOlder(h, time.Now().Add(time.Hour)); err != nil || !deleted {
				t.Fatalf("DeleteIfOlder: %v %v", deleted, err)
			}
		}},
		{"Get of a corrupt blob", func(s *Store, h string) {
			if err := os.WriteFile(s.path(h), []byte("damaged"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(h); err == nil {
				t.Fatal("Get handed out a corrupt blob")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			h, err := s.Put([]byte("held"))
			if err != nil {
				t.Fatal(err)
			}
			if !s.Renew(h) || !s.Renew(h) {
				t.Fatal("Renew: a held blob is not held")
			}
			tc.remove(s, h)
			if s.Renew(h) {
				t.Fatal("Renew says a removed blob is held")
			}
			if _, err := s.Put([]byte("held")); err != nil || !s.Renew(h) {
				t.Fatalf("stored again: Put %v, Renew false", err)
			}
		})
	}
}
