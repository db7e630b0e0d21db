package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime/browser"
)

// A node SIGKILLed with one job running and one queued loses neither: after
// a restart on the same data dir both run to completion, the interrupted
// one as a new attempt.
func TestSIGKILLLosesNoAcceptedJob(t *testing.T) {
	p := newProc(t, "--wasm-slots", "1", "--prefetch", "0")
	p.start()
	sleep, reverse := testwasm.Path(t, "sleep"), testwasm.Path(t, "reverse")

	// Long enough that the kill lands mid-run even on a loaded CI machine
	// (each CLI call below is a process start).
	r := p.cli("job", "submit", "--wasm", sleep, "--input", "15s")
	running := strings.TrimSpace(r.stdout)
	r2 := p.cli("job", "submit", "--wasm", reverse, "--input", "queued")
	queued := strings.TrimSpace(r2.stdout)
	if r.code != 0 || r2.code != 0 {
		t.Fatalf("submit: %+v %+v", r, r2)
	}
	p.waitPhase(running, "running")
	if j := p.job(queued); j.Phase != "queued" {
		t.Fatalf("second job should wait for the only slot, is %s", j.Phase)
	}
	if j := p.job(running); j.Phase != "running" {
		t.Fatalf("the long job should still be running before the kill, is %s", j.Phase)
	}

	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	p.cmd = nil
	p.start()

	j := p.waitPhase(running, "completed", "failed")
	if j.Phase != "completed" || j.Output != "slept 15s" || j.Attempt != 2 {
		t.Fatalf("interrupted job after restart: %+v", j)
	}
	q := p.waitPhase(queued, "completed", "failed")
	if q.Phase != "completed" || q.Output != "deueuq" || q.Attempt != 1 {
		t.Fatalf("queued job after restart: %+v", q)
	}
}

// SIGTERM stops the node cleanly and the next start resumes.
func TestSIGTERMStopsCleanly(t *testing.T) {
	p := newProc(t)
	p.start()
	r := p.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "abc", "--wait")
	if r.code != 0 || r.stdout != "cba" {
		t.Fatalf("submit: %+v", r)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("node exited with %v after SIGTERM; log:\n%s", err, p.log)
	}
	p.cmd = nil
	p.start()
	// Lists carry no outputs: find the job, then read it.
	r = p.cli("job", "list", "--json")
	var list struct{ Jobs []struct{ ID string } }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Jobs) != 1 {
		t.Fatalf("job lost across restart: %v %+v", err, r)
	}
	if r := p.cli("job", "get", list.Jobs[0].ID, "--json"); !strings.Contains(r.stdout, `"output": "cba"`) {
		t.Fatalf("job result lost across restart: %+v", r)
	}
}

// A node SIGKILLed cannot remove its browser's profile (a Chromium user
// data directory with the jobs' cookies and caches); the next start on the
// same data dir does. It used to live in the temporary directory, where
// every killed node left one for good.
func TestSIGKILLLeavesNoBrowserProfile(t *testing.T) {
	if _, ok := browser.Detect(); !ok {
		t.Fatalf("no Chromium to start: %s (make deps installs it)", browser.InstallHint)
	}
	p := newProc(t)
	p.start()
	dir := filepath.Join(p.dataDir, "browser")
	first := waitProfiles(t, dir, "")
	p.kill()
	p.start()
	second := waitProfiles(t, dir, first)
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Errorf("the killed node's profile %s is still there after the restart (stat: %v)", first, err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("node exited with %v after SIGTERM; log:\n%s", err, p.log)
	}
	p.cmd = nil
	if _, err := os.Stat(second); !os.IsNotExist(err) {
		t.Errorf("a node stopped with SIGTERM left its browser's profile %s (stat: %v)", second, err)
	}
}

// waitProfiles waits until dir holds exactly one browser profile other
// than not, and returns it.
func waitProfiles(t *testing.T, dir, not string) string {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got, _ = filepath.Glob(filepath.Join(dir, "profile-*"))
		if len(got) == 1 && got[0] != not {
			return got[0]
		}
	}
	t.Fatalf("browser profiles in %s: %v, want one (other than %q)", dir, got, not)
	return ""
}
