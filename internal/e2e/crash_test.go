package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
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
