package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testbuf"
	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// An array's outputs keep their lines: a task with empty stdout prints an
// empty line (output line N is input line N's), --output-dir writes an
// empty file for it, --json an empty output; the template claims no
// phase.
func TestArrayEmptyOutputKeepsItsLine(t *testing.T) {
	c := startNode(t)
	dir := t.TempDir()
	lines := filepath.Join(dir, "in.txt")
	os.WriteFile(lines, []byte("a\nb\n\nc"), 0o600)
	mod := testwasm.Path(t, "reverse")
	r := c.cli("job", "submit", "--wasm", mod, "--inputs", lines, "--wait")
	if r.code != 0 || r.stdout != "a\nb\n\nc\n" {
		t.Fatalf("submit --inputs --wait: want 4 lines, the third empty: %+v", r)
	}
	out := filepath.Join(dir, "out")
	if r := c.cli("job", "submit", "--wasm", mod, "--inputs", lines, "--wait", "--output-dir", out); r.code != 0 || r.stdout != "" {
		t.Fatalf("--output-dir: %+v", r)
	}
	for i, want := range []string{"a", "b", "", "c"} {
		b, err := os.ReadFile(filepath.Join(out, "00000"+string(rune('0'+i))+".out"))
		if err != nil || string(b) != want {
			t.Fatalf("task %d's file: %q %v, want %q", i, b, err, want)
		}
	}
	r = c.cli("job", "submit", "--wasm", mod, "--inputs", lines, "--wait", "--json")
	var doc struct {
		Array map[string]any `json:"array"`
		Tasks []jobJSON      `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 || len(doc.Tasks) != 4 || doc.Tasks[2].Output != "" || doc.Tasks[3].Output != "c" {
		t.Fatalf("--json: %v %+v", err, r)
	}
	tmpl, _ := doc.Array["template"].(map[string]any)
	if _, has := tmpl["phase"]; tmpl == nil || has {
		t.Fatalf("the array's template has a phase (or no template): %v", doc.Array)
	}
	id, _ := doc.Array["id"].(string)
	r = c.cli("job", "get", id, "--json")
	if r.code != 0 || strings.Contains(r.stdout, `"phase"`) {
		t.Fatalf("job get ARRAY --json claims a phase: %+v", r)
	}
}

// job list: --array with a task's id names the array and both commands;
// --node with an unknown id fails naming the nodes, with a node's own id
// (no jobs there) lists nothing; --limit above the page size is refused.
func TestJobListMistakes(t *testing.T) {
	c := startNode(t)
	lines := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(lines, []byte("x\ny\n"), 0o600)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", lines)
	arr := strings.TrimSpace(r.stdout)
	if r.code != 0 || arr == "" {
		t.Fatalf("submit: %+v", r)
	}
	task := arr + ".1"
	r = c.cli("job", "list", "--array", task)
	if r.code != 1 || !strings.Contains(r.stderr, "task 1 of job array "+arr) || !strings.Contains(r.stderr, "palyra job list --array "+arr+"'") ||
		!strings.Contains(r.stderr, "palyra job get "+task) {
		t.Fatalf("job list --array TASK: %+v", r)
	}
	r = c.cli("job", "list", "--node", "n-nope")
	if r.code != 1 || !strings.Contains(r.stderr, `no node with id "n-nope"`) || !strings.Contains(r.stderr, c.node.ID()) ||
		!strings.Contains(r.stderr, "palyra nodes") || r.stdout != "" {
		t.Fatalf("job list --node UNKNOWN: %+v", r)
	}
	if r := c.cli("job", "list", "--node", c.node.ID(), "--phase", "aborted"); r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("job list --node OWN-ID with nothing to list: want the header alone: %+v", r)
	}
	r = c.cli("job", "list", "--limit", "5000")
	if r.code != 2 || !strings.Contains(r.stderr, "at most 1000") || !strings.Contains(r.stderr, "--after") {
		t.Fatalf("job list --limit 5000: %+v", r)
	}
}

// job logs --json prints one JSON object per line.
func TestJobLogsJSON(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "ticker"), "--input", "2 10ms")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	r = c.cli("job", "logs", "-f", id, "--json")
	if r.code != 0 {
		t.Fatalf("logs -f --json: %+v", r)
	}
	var stdout, stderr, phase string
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var m logJSON
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v (all: %q)", line, err, r.stdout)
		}
		stdout, stderr = stdout+m.Stdout, stderr+m.Stderr
		if m.Phase != "" {
			phase = m.Phase
		}
	}
	if stdout != "tick 1\ntick 2\n" || stderr != "tock 1\ntock 2\n" || phase != "completed" || r.stderr != "" {
		t.Fatalf("logs --json: stdout %q stderr %q phase %q; %+v", stdout, stderr, phase, r)
	}
}

// runInterrupted runs a command against c and cancels its context (as
// SIGINT does, through run's signal.NotifyContext) after d.
func (c *cluster) runInterrupted(d time.Duration, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(d, cancel)
	args = append([]string{"palyra", "--data-dir", c.dir, "--addr", c.node.Addr()}, args...)
	code := run(ctx, args, strings.NewReader(""), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// runInterruptedOnceAccepted is runInterrupted for a submission: it is
// interrupted once the node holds more jobs than before (the submission
// was accepted) and a little after, so the command is following it; on a
// loaded machine a fixed delay could interrupt it before the node
// answered, which is another message (the outcome is unknown then).
func (c *cluster) runInterruptedOnceAccepted(args ...string) result {
	c.t.Helper()
	st := c.node.Cluster().State()
	before := st.JobCount()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for st.JobCount() == before && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
		cancel()
	}()
	args = append([]string{"palyra", "--data-dir", c.dir, "--addr", c.node.Addr()}, args...)
	code := run(ctx, args, strings.NewReader(""), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// runInterruptedOnceFollowing is runInterrupted for a command that prints
// as it follows: it is interrupted once it has printed something (it is
// following then), not after a fixed delay that a loaded machine can
// outlast while still dialling.
func (c *cluster) runInterruptedOnceFollowing(args ...string) result {
	c.t.Helper()
	var out, errb testbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for out.String() == "" && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	args = append([]string{"palyra", "--data-dir", c.dir, "--addr", c.node.Addr()}, args...)
	code := run(ctx, args, strings.NewReader(""), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// Interrupting a command that follows a job says that it stopped
// following, that the job goes on and how to follow it again, and exits
// 130; never a transport diagnosis or "context canceled".
func TestInterruptedFollowSaysTheJobGoesOn(t *testing.T) {
	c := startNode(t)
	sleep := testwasm.Path(t, "sleep")
	lines := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(lines, []byte("5m\n5m\n"), 0o600)
	r := c.cli("job", "submit", "--wasm", sleep, "--input", "5m", "--timeout", "10m")
	job := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	check := func(name string, r result, id string) {
		t.Helper()
		if id == "" {
			id = "j-" // a submission: its id, whatever it is
		}
		if r.code != exitInterrupted || !strings.Contains(r.stderr, "stopped following") || !strings.Contains(r.stderr, "goes on") ||
			!strings.Contains(r.stderr, "palyra job watch "+id) ||
			strings.Contains(r.stderr, "context canceled") || strings.Contains(r.stderr, "UDP") || strings.Contains(r.stderr, "H3_") {
			t.Errorf("%s interrupted: want exit %d, 'stopped following', the job id and no transport error: %+v", name, exitInterrupted, r)
		}
	}
	check("job watch", c.runInterruptedOnceFollowing("job", "watch", job), job)
	check("job watch --json", c.runInterruptedOnceFollowing("job", "watch", job, "--json"), job)
	r = c.runInterruptedOnceAccepted("job", "submit", "--wasm", sleep, "--input", "5m", "--timeout", "10m", "--wait")
	check("job submit --wait", r, "")
	r = c.runInterruptedOnceAccepted("job", "submit", "--wasm", sleep, "--input", "5m", "--timeout", "10m", "--wait", "--idempotency-key", "k1")
	check("job submit --wait --idempotency-key", r, "")
	r = c.runInterruptedOnceAccepted("job", "submit", "--wasm", sleep, "--inputs", lines, "--timeout", "10m", "--wait")
	check("job submit --inputs --wait", r, "")
	r = c.runInterrupted(time.Second, "job", "logs", "-f", job)
	if r.code != exitInterrupted || !strings.Contains(r.stderr, "stopped reading the logs of job "+job) || !strings.Contains(r.stderr, "palyra job logs -f "+job) {
		t.Errorf("job logs -f interrupted: %+v", r)
	}
	// The job goes on indeed.
	if j := c.jobJSON(job); j.Phase != "running" && j.Phase != "queued" {
		t.Fatalf("the followed job is %s", j.Phase)
	}
	c.cli("job", "cancel", job)
}
