// Package blob is a content-addressed store on local disk: a blob's name is
// the lowercase hex sha256 of its bytes. Raft records carry only names; the
// bytes live here (and, across nodes, are fetched from peers and verified).
//
// Writes are atomic and durable: bytes go to a temp file that is fsynced
// and renamed into place, then the directory is fsynced, so a crash leaves
// either the whole blob or nothing.
package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ErrNotFound is returned for a hash the store does not hold.
var ErrNotFound = errors.New("blob not found")

// Store keeps blobs under dir/sha256/<first two hex>/<hash>.
type Store struct {
	dir string
	// ageMu orders renewing a blob's age against collection's look at it
	// and removal (DeleteIfOlder), so a blob renewed for a commit about to
	// name it is never removed on its old age.
	ageMu sync.Mutex
	// aged holds, under ageMu, the age (modification time) of blobs this
	// store looked at or renewed in the last renewAfter: Renew answers
	// for them without a stat per submit. Every removal drops its entry.
	aged      map[string]time.Time
	agedSwept time.Time // when aged was last swept of old entries
	// syncDir fsyncs a directory; tests replace it to see which
	// directories a store syncs and to make a sync fail.
	syncDir func(dir string) error
}

// Open creates the store directory (0700) if needed.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "sha256"), 0o700); err != nil {
		return nil, fmt.Errorf("create blob dir: %w", err)
	}
	return &Store{dir: dir, syncDir: fsyncDir}, nil
}

// fsyncDir makes the entries of dir (creations, renames) durable.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// shardDir returns the directory blob h goes in, creating it if needed.
// A new directory is durable only once its parent is synced: a blob
// renamed into a directory that a crash then loses would be lost too.
func (s *Store) shardDir(h string) (string, error) {
	dir := filepath.Dir(s.path(h))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create blob dir: %w", err)
	}
	if err := s.syncDir(filepath.Dir(dir)); err != nil {
		os.Remove(dir) // so the next store creates and syncs it again
		return "", fmt.Errorf("sync blob dir %s: %w", filepath.Dir(dir), err)
	}
	return dir, nil
}

// Hash returns the name data would be stored under.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ValidHash reports whether h looks like a blob name.
func ValidHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && h == toLower(h)
}

func toLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'F' {
			b[i] = c + 32
		}
	}
	return string(b)
}

func (s *Store) path(h string) string {
	return filepath.Join(s.dir, "sha256", h[:2], h)
}

// Put stores data and returns its hash. Storing an existing blob is a no-op.
func (s *Store) Put(data []byte) (string, error) {
	h := Hash(data)
	p := s.path(h)
	s.ageMu.Lock()
	if _, err := os.Stat(p); err == nil {
		// Held already: renew its age, so collection's grace period counts
		// from the newest store (a job about to name it is safe).
		now := time.Now()
		if os.Chtimes(p, now, now) == nil {
			s.noteAge(h, now)
		}
		s.ageMu.Unlock()
		return h, nil
	}
	s.ageMu.Unlock()
	dir, err := s.shardDir(h)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("create blob: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write blob %s: %w", h, err)
	}
	// The rename is durable only once the directory is: a failed sync is
	// a failed store.
	if err := s.syncDir(dir); err != nil {
		return "", fmt.Errorf("sync blob dir for %s: %w", h, err)
	}
	return h, nil
}

// Get returns the blob's bytes, verified against its hash: a blob damaged
// on disk is reported (and removed) rather than handed out.
func (s *Store) Get(h string) ([]byte, error) {
	if !ValidHash(h) {
		return nil, fmt.Errorf("invalid blob hash %q", h)
	}
	data, err := os.ReadFile(s.path(h))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, h)
	}
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", h, err)
	}
	if Hash(data) != h {
		s.ageMu.Lock()
		delete(s.aged, h)
		os.Remove(s.path(h))
		s.ageMu.Unlock()
		return nil, fmt.Errorf("%w: %s was corrupt on disk and has been removed", ErrNotFound, h)
	}
	return data, nil
}

// Has reports whether the store holds h.
func (s *Store) Has(h string) bool {
	if !ValidHash(h) {
		return false
	}
	_, err := os.Stat(s.path(h))
	return err == nil
}

// renewAfter is how old a blob's age must be before Renew writes it
// again: well under any collection grace (minutes by default, seconds in
// tests), and a blob named by every submit is touched at most once a
// second, not on each.
const renewAfter = time.Second

// Renew reports whether the store holds h and, if it does, renews its
// age as a Put of it would (when older than a minute): a blob about to
// be named again by a commit must not look unused to collection, whose
// grace counts from the last store.
func (s *Store) Renew(h string) bool {
	if !ValidHash(h) {
		return false
	}
	p := s.path(h)
	now := time.Now()
	s.ageMu.Lock()
	defer s.ageMu.Unlock()
	if at, ok := s.aged[h]; ok && now.Sub(at) >= 0 && now.Sub(at) <= renewAfter {
		return true // held, and young enough: what the stat below would find
	}
	fi, err := os.Stat(p)
	if err != nil {
		delete(s.aged, h)
		return false
	}
	at := fi.ModTime()
	if now.Sub(at) > renewAfter && os.Chtimes(p, now, now) == nil {
		at = now
	}
	s.noteAge(h, at)
	return true
}

// noteAge records, under ageMu, that blob h is held with age at; entries
// older than renewAfter are dropped once there are many.
func (s *Store) noteAge(h string, at time.Time) {
	if s.aged == nil {
		s.aged = map[string]time.Time{}
	}
	if now := time.Now(); len(s.aged) >= 256 && now.After(s.agedSwept.Add(renewAfter)) {
		s.agedSwept = now // at most one sweep per renewAfter, however many blobs are young
		for k, v := range s.aged {
			if now.Sub(v) > renewAfter {
				delete(s.aged, k)
			}
		}
	}
	s.aged[h] = at
}

// DeleteIfOlder removes blob h if it was last stored or renewed before
// cutoff, and says whether it did: collection's removal, which a Renew or
// Put since its walk wins over.
func (s *Store) DeleteIfOlder(h string, cutoff time.Time) (bool, error) {
	if !ValidHash(h) {
		return false, fmt.Errorf("invalid blob hash %q", h)
	}
	p := s.path(h)
	s.ageMu.Lock()
	defer s.ageMu.Unlock()
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		delete(s.aged, h)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.ModTime().Before(cutoff) {
		return false, nil
	}
	delete(s.aged, h)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("delete blob %s: %w", h, err)
	}
	return true, nil
}

// tempPrefix starts the names of the temp files of stores in progress.
const tempPrefix = ".tmp-"

// SweepTemp removes the temp files of stores that never finished (their
// process was killed between write and rename) and returns how many. Call
// it only while no store is in progress: when the process that owns the
// data dir opens it.
func (s *Store) SweepTemp() (int, error) {
	root := filepath.Join(s.dir, "sha256")
	prefixes, err := os.ReadDir(root)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range prefixes {
		if !p.IsDir() {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(root, p.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tempPrefix) {
				if err := os.Remove(filepath.Join(root, p.Name(), e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
					continue
				}
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}

// Info describes one stored blob.
type Info struct {
	Hash    string
	Size    int64
	ModTime time.Time // when it was last stored
}

// Walk calls fn for every blob held (in no particular order) until fn
// returns false. Temp files of stores in progress are skipped.
func (s *Store) Walk(fn func(Info) bool) error {
	root := filepath.Join(s.dir, "sha256")
	prefixes, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range prefixes {
		if !p.IsDir() {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(root, p.Name()))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !ValidHash(e.Name()) {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			if !fn(Info{Hash: e.Name(), Size: fi.Size(), ModTime: fi.ModTime()}) {
				return nil
			}
		}
	}
	return nil
}

// Delete removes blob h (no error if it is not held).
func (s *Store) Delete(h string) error {
	if !ValidHash(h) {
		return fmt.Errorf("invalid blob hash %q", h)
	}
	s.ageMu.Lock()
	defer s.ageMu.Unlock()
	delete(s.aged, h)
	if err := os.Remove(s.path(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete blob %s: %w", h, err)
	}
	return nil
}
