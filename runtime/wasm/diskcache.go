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

// diskTrimEvery is how often, at most, a compilation trims the cache.
const diskTrimEvery = 30 * time.Second

// diskTrimmer keeps the on-disk compilation cache under its bound. wazero
// writes one file per compiled module and never removes any, so without
// this every new module (every rebuild of a guest) stays on disk forever,
// on every worker. Files are removed oldest written first, down to 80% of
// the bound; a removed entry costs one compilation the next time a
// restarted worker meets that module (the compiled modules a running
// worker uses stay in memory). Temporary files left by a crash in the
// middle of a write go after an hour, and so do the directories of other
// wazero versions, by age, like any entry.
type diskTrimmer struct {
	dir   string
	max   int64
	every time.Duration
	log   *slog.Logger

	mu   sync.Mutex // held while trimming; TryLock skips a trim in progress
	last time.Time
}

// maybeTrim trims unless it did within every (or a trim is running).
func (t *diskTrimmer) maybeTrim(now time.Time) {
	if t == nil || !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < t.every {
		return
	}
	t.last = now
	t.trimLocked(now)
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
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return nil
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
		if err := os.Remove(f.path); err == nil || os.IsNotExist(err) {
			total -= f.size
			removed++
		}
	}
	t.log.Info("trimmed the wasm compilation cache", "dir", t.dir, "removed", removed,
		"bytes_before", before, "bytes_after", total, "max_bytes", t.max)
}
