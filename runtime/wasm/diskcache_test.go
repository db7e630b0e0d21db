package wasm

import (
	"context"
	"fmt"
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
// after an hour, a fresh one (a write in progress) stays; files that are
// not wazero's stay whatever their age.
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
	put("notes/mine.txt", 5000, 100*time.Hour)                    // not wazero's
	put("README", 5000, 100*time.Hour)
	tr := newDiskTrimmer(dir, 1000, time.Hour, slog.Default())
	tr.trim(now) // 1,250 bytes of wazero's against 1,000: down to 800
	keep := []string{"README", "notes/mine.txt"}
	want := append([]string{"wazero-v1.12.0-amd64-linux/cc", "wazero-v1.12.0-amd64-linux/dd", "wazero-v1.12.0-amd64-linux/ff.456.tmp"}, keep...)
	sort.Strings(want)
	if got := cacheNames(t, dir); !equalStrings(got, want) {
		t.Fatalf("after trimming: %v, want %v", got, want)
	}
	put("wazero-v1.12.0-amd64-linux/gg", 700, 0)
	tr.trim(now.Add(2 * time.Hour)) // ff is two hours old now: a leftover
	want = append([]string{"wazero-v1.12.0-amd64-linux/gg"}, keep...)
	sort.Strings(want)
	if got := cacheNames(t, dir); !equalStrings(got, want) {
		t.Fatalf("after the second trim: %v, want %v", got, want)
	}
}

// A trim asked for within the interval of the last one is not dropped: it
// runs once the interval has passed (a burst of compilations right after
// a start left the cache over its bound until some later compilation).
// A symlinked cache directory is trimmed too.
func TestDiskCacheTrimAskedTooSoonRunsLater(t *testing.T) {
	real := t.TempDir()
	dir := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, dir); err != nil {
		t.Fatal(err)
	}
	tr := newDiskTrimmer(dir, 100, 50*time.Millisecond, slog.Default())
	defer tr.close()
	tr.trim(time.Now())
	p := filepath.Join(real, "wazero-v1.12.0-amd64-linux", "aa")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	tr.request()
	tr.request() // one pending trim at a time
	deadline := time.Now().Add(10 * time.Second)
	for len(cacheNames(t, real)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a trim asked for within the interval never ran: %v", cacheNames(t, real))
		}
		time.Sleep(10 * time.Millisecond)
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
	if err := os.MkdirAll(filepath.Join(dir, "wazero-old"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wazero-old", "junk"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newExecutor(t, Config{CacheDir: dir, CacheMaxBytes: 1})
	if got := cacheNames(t, dir); len(got) != 0 {
		t.Fatalf("after start: %v left in a cache bounded at 1 byte", got)
	}
	e.trim.every = 20 * time.Millisecond // the next trim is due 20 ms after the start's
	for i := range 3 {
		res := e.Run(context.Background(), runtime.Spec{Module: writeModule(1, fmt.Sprint("hello ", i), false, 0)})
		wantReason(t, res, runtime.ReasonNone)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(cacheNames(t, dir)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after three compilations: %v left in a cache bounded at 1 byte", cacheNames(t, dir))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
