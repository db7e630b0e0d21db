package wasm

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
)

// cacheNames lists the regular files under dir, relative, sorted.
func cacheNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// The on-disk cache is kept under its bound, the entries written longest
// ago removed first down to 80% of it; temporary files a crash left go
// after an hour, a fresh one (a write in progress) stays.
func TestDiskCacheTrimsOldestFirst(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	put := func(name string, size int, age time.Duration) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	put("wazero-v1.11.0-amd64-linux/aa", 400, 72*time.Hour) // another version's, oldest
	put("wazero-v1.12.0-amd64-linux/bb", 300, 48*time.Hour)
	put("wazero-v1.12.0-amd64-linux/cc", 300, time.Hour)
	put("wazero-v1.12.0-amd64-linux/dd", 200, time.Minute)
	put("wazero-v1.12.0-amd64-linux/ee.123.tmp", 50, 2*time.Hour) // a crash's leftover
	put("wazero-v1.12.0-amd64-linux/ff.456.tmp", 50, time.Second) // being written
	tr := &diskTrimmer{dir: dir, max: 1000, every: time.Hour, log: slog.Default()}
	tr.maybeTrim(now) // 1,250 bytes against 1,000: down to 800
	want := []string{"wazero-v1.12.0-amd64-linux/cc", "wazero-v1.12.0-amd64-linux/dd", "wazero-v1.12.0-amd64-linux/ff.456.tmp"}
	if got := cacheNames(t, dir); !equalStrings(got, want) {
		t.Fatalf("after trimming: %v, want %v", got, want)
	}
	put("wazero-v1.12.0-amd64-linux/gg", 700, 0)
	tr.maybeTrim(now.Add(time.Minute)) // within every: nothing happens
	if got := cacheNames(t, dir); len(got) != 4 {
		t.Fatalf("a trim within the interval removed files: %v", got)
	}
	tr.maybeTrim(now.Add(2 * time.Hour)) // ff is two hours old now: a leftover
	if got := cacheNames(t, dir); !equalStrings(got, []string{"wazero-v1.12.0-amd64-linux/gg"}) {
		t.Fatalf("after the second trim: %v", got)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An Executor trims its cache when it starts and after it compiles a
// module (wazero adds an entry per module and removes none: every rebuilt
// guest stayed on disk on every worker).
func TestExecutorKeepsItsDiskCacheBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(filepath.Join(dir, "old"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old", "junk"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newExecutor(t, Config{CacheDir: dir, CacheMaxBytes: 1})
	if got := cacheNames(t, dir); len(got) != 0 {
		t.Fatalf("after start: %v left in a cache bounded at 1 byte", got)
	}
	e.trim.every = 0
	res := e.Run(context.Background(), runtime.Spec{Module: writeModule(1, "hello", false, 0)})
	wantReason(t, res, runtime.ReasonNone)
	if got := cacheNames(t, dir); len(got) != 0 {
		t.Fatalf("after a compilation: %v left in a cache bounded at 1 byte", got)
	}
}
