package wasm

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultCacheMaxBytes bounds the on-disk compilation cache. A compiled
// module takes about five times its size (a 2.6 MB Go guest is ~14 MB of
// native code), so this holds seventy or so such guests.
const DefaultCacheMaxBytes int64 = 1 << 30

// diskTrimEvery is how often, at most, compilations trim the cache.
const diskTrimEvery = 30 * time.Second

// diskTrimmer keeps the on-disk compilation cache under its bound. wazero
// writes one file per compiled module and never removes any, so without
// this every new module (every rebuild of a guest) stays on disk forever,
// on every worker. Files are removed oldest written first, down to 80% of
// the bound; a removed entry costs one compilation the next time a
// restarted worker meets that module (the compiled modules a running
// worker uses stay in memory). Only wazero's own files are touched (under
// a "wazero-*" directory: other versions' go by age like any entry);
// temporary files a crash left in the middle of a write go after an hour.
type diskTrimmer struct {
	dir   string
	max   int64
	every time.Duration
	log   *slog.Logger

	mu sync.Mutex // held while trimming

	reqMu  sync.Mutex
	last   time.Time   // when the last trim started
	timer  *time.Timer // the trim due once every has passed since last
	closed bool
}

func newDiskTrimmer(dir string, max int64, every time.Duration, log *slog.Logger) *diskTrimmer {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real // a walk does not follow a symlinked root
	}
	return &diskTrimmer{dir: dir, max: max, every: every, log: log}
}

// request has the cache trimmed, off the caller's goroutine: at once, or,
// within every of the last trim, once every has passed (one trim pending
// at a time), so a burst of compilations is trimmed after it, not never.
func (t *diskTrimmer) request() {
	if t == nil {
		return
	}
	t.reqMu.Lock()
	defer t.reqMu.Unlock()
	if t.closed || t.timer != nil {
		return
	}
	wait := time.Duration(0)
	if !t.last.IsZero() {
		wait = max(t.every-time.Since(t.last), 0)
	}
	t.timer = time.AfterFunc(wait, func() {
		t.reqMu.Lock()
		t.timer = nil
		if t.closed {
			t.reqMu.Unlock()
			return
		}
		t.reqMu.Unlock()
		t.trim(time.Now())
	})
}

// trim trims now (after a trim in progress), unless the trimmer is closed.
func (t *diskTrimmer) trim(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reqMu.Lock()
	closed := t.closed
	t.last = now
	t.reqMu.Unlock()
	if !closed { // close may have come between the timer and here
		t.trimLocked(now)
	}
}

// close stops a pending trim and waits for one in progress.
func (t *diskTrimmer) close() {
	if t == nil {
		return
	}
	t.reqMu.Lock()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.reqMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock() // a trim in progress has ended
}

// trimLocked removes what is over the bound. t.mu is held.
func (t *diskTrimmer) trimLocked(now time.Time) {
	type entry struct {
		path string
		size int64
		mod  time.Time
	}
	var files []entry
	var total int64
	_ = filepath.WalkDir(t.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if path != t.dir && filepath.Dir(path) == t.dir && !strings.HasPrefix(d.Name(), "wazero") {
				return fs.SkipDir // not wazero's
			}
			return nil
		}
		if !d.Type().IsRegular() || filepath.Dir(path) == t.dir {
			return nil // wazero keeps its files in a directory of its version
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasSuffix(d.Name(), ".tmp") && now.Sub(info.ModTime()) > time.Hour {
			_ = os.Remove(path) // a write a crash interrupted
			return nil
		}
		files = append(files, entry{path, info.Size(), info.ModTime()})
		total += info.Size()
		return nil
	})
	if total <= t.max {
		return
	}
	sort.Slice(files, func(a, b int) bool { return files[a].mod.Before(files[b].mod) })
	before, removed := total, 0
	for _, f := range files {
		if total <= t.max/5*4 {
			break
		}
		if strings.HasSuffix(f.path, ".tmp") {
			continue // being written
		}
		switch err := os.Remove(f.path); {
		case err == nil:
			total -= f.size
			removed++
		case os.IsNotExist(err):
			total -= f.size // another trim of the same directory took it
		}
	}
	t.log.Info("trimmed the wasm compilation cache", "dir", t.dir, "removed", removed,
		"bytes_before", before, "bytes_after", total, "max_bytes", t.max)
}
