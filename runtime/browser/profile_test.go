package browser

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// profilesIn lists the profile directories under dir.
func profilesIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), profilePrefix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// TestProfileDir: with Config.ProfileDir, each browser's profile lives
// there and goes when the browser does; one left by a killed process is
// removed at the next start, and nothing else in the directory is touched.
// Without it a killed node left a profile in the temporary directory on
// every start (CI machines gathered thousands).
func TestProfileDir(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, profilePrefix+"123456")
	if err := os.MkdirAll(filepath.Join(stale, "Default"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "Default", "Cookies"), []byte("a job's cookies"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "README")
	if err := os.WriteFile(other, []byte("not a profile"), 0o600); err != nil {
		t.Fatal(err)
	}

	e := newExecutor(t, Config{ProfileDir: dir, Slots: 1})
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the profile a killed browser left is still there (stat: %v)", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not a profile was removed: %v", err)
	}
	first := profilesIn(t, dir)
	pid := e.browserPID()
	if len(first) != 1 {
		t.Fatalf("profiles after start: %v, want one", first)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(cmdline), "\x00"), "--user-data-dir="+first[0]) {
		t.Fatalf("the browser does not use %s: %q", first[0], cmdline)
	}

	// A browser that dies is replaced; its profile goes.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	old := e.lanes[0].br.cur
	e.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); !old.lost(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the executor did not see its browser die")
		}
	}
	afterCrash(t, e, alivePage(t), pid)
	var now []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if now = profilesIn(t, dir); len(now) == 1 && now[0] != first[0] {
			break
		}
	}
	if len(now) != 1 || now[0] == first[0] {
		t.Errorf("profiles after the browser died and was replaced: %v, want one other than %s", now, first[0])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := profilesIn(t, dir); len(left) != 0 {
		t.Errorf("profiles after Close: %v, want none", left)
	}
}
