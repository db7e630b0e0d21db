package browser

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
)

func TestArtifactAndOutputLimits(t *testing.T) {
	e := sharedVariant(t, "small artifacts", func(c *Config) {
		c.MaxArtifactBytes = 64 << 10
		c.MaxArtifactsTotal = 40 << 10
	})
	site := alivePage(t)

	// One artifact over the per-artifact bound.
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "evaluate", "name": "ok", "expression": "true"},
		map[string]any{"action": "evaluate", "name": "noise", "expression": noisyPage},
		map[string]any{"action": "screenshot", "name": "big.png"},
	)))
	if r.Reason != runtime.ReasonOutputLimit || !strings.Contains(r.Message, "steps[3] (screenshot)") || !strings.Contains(r.Message, "per-artifact limit") {
		t.Fatalf("got %q %q, want output_limit at the screenshot naming the per-artifact limit", r.Reason, r.Message)
	}
	if len(r.Artifacts) != 0 || values(t, r)["ok"] != true {
		t.Errorf("got %d artifacts and stdout %s, want none and the values before the failure", len(r.Artifacts), r.Stdout)
	}

	// Two artifacts that fit alone but not together: a 100×100 noise
	// square is about 30 KB as PNG (30,000 random bytes do not compress).
	r = run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "evaluate", "name": "noise", "expression": noiseSquare},
		map[string]any{"action": "screenshot", "name": "a.png", "selector": "#sq"},
		map[string]any{"action": "screenshot", "name": "b.png", "selector": "#sq"},
	)))
	if r.Reason != runtime.ReasonOutputLimit || !strings.Contains(r.Message, "steps[3] (screenshot)") || !strings.Contains(r.Message, "total limit") {
		t.Fatalf("got %q %q, want output_limit naming the total limit", r.Reason, r.Message)
	}
	if got := names(r.Artifacts); len(got) != 1 || got[0] != "a.png" {
		t.Errorf("artifacts %v, want [a.png], the one that fitted", got)
	}

	// Stdout over Spec.MaxOutput.
	spec := loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "evaluate", "name": "small", "expression": "1"},
		map[string]any{"action": "evaluate", "name": "big", "expression": `"x".repeat(1000)`},
	))
	spec.MaxOutput = 200
	r = run(t, e, spec)
	if r.Reason != runtime.ReasonOutputLimit || !strings.Contains(r.Message, `value "big"`) {
		t.Fatalf("got %q %q, want output_limit naming the value", r.Reason, r.Message)
	}
	if strings.Contains(r.Message, "--max-output") || !strings.Contains(r.Hint, "--max-output") {
		t.Errorf("message %q, hint %q: want the fix (--max-output) in the hint alone", r.Message, r.Hint)
	}
	if string(r.Stdout) != `{"small":1}` {
		t.Errorf("stdout %s, want the values that fitted", r.Stdout)
	}
}

// noisyPage fills the viewport with random colours so its PNG is large.
const noisyPage = `(() => {
  const c = document.createElement("canvas"); c.width = 1280; c.height = 800;
  c.style = "position:fixed;left:0;top:0"; document.body.appendChild(c);
  const x = c.getContext("2d"), d = x.createImageData(1280, 800);
  for (let i = 0; i < d.data.length; i++) d.data[i] = (Math.random() * 256) | 0;
  x.putImageData(d, 0, 0); return true })()`

// noiseSquare adds a 100×100 canvas of random colours with id "sq".
const noiseSquare = `(() => {
  const c = document.createElement("canvas"); c.width = 100; c.height = 100; c.id = "sq";
  document.body.appendChild(c);
  const x = c.getContext("2d"), d = x.createImageData(100, 100);
  for (let i = 0; i < d.data.length; i++) d.data[i] = i % 4 == 3 ? 255 : (Math.random() * 256) | 0;
  x.putImageData(d, 0, 0); return true })()`

func names(as []runtime.Artifact) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Name)
	}
	return out
}

func TestTimeouts(t *testing.T) {
	e := shared(t)
	site := alivePage(t)
	wait := map[string]any{"action": "wait_for", "text": "never shown", "timeout_ms": 60000}

	spec := loopbackSpec(script(t, map[string]any{"action": "navigate", "url": site + "/"}, wait))
	spec.Timeout = 700 * time.Millisecond
	r := run(t, e, spec)
	// On a loaded machine the deadline can strike during setup already;
	// either way the 60 s step must not run out its own timeout.
	if r.Reason != runtime.ReasonTimeout || !strings.Contains(r.Message, "job timed out after 700ms (the job's --timeout)") {
		t.Fatalf("Spec.Timeout: got %q %q, want a job timeout after 700ms naming --timeout", r.Reason, r.Message)
	}
	if r.Hint != "raise it with --timeout" {
		t.Errorf("Spec.Timeout: hint %q, want how to raise it", r.Hint)
	}

	// The script's timeout_ms is each step's default, and a step that
	// runs out of it says so: it does not bound the whole run.
	b, _ := json.Marshal(map[string]any{"timeout_ms": 700, "steps": []any{
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "wait_for", "text": "never shown"}}})
	r = run(t, e, loopbackSpec(b))
	if r.Reason != runtime.ReasonStepFailed || !strings.HasPrefix(r.Message, "steps[1] (wait_for): ") || !strings.Contains(r.Message, "step timeout of 700ms (set by the script's timeout_ms) ran out") {
		t.Fatalf("script timeout_ms: got %q %q, want steps[1] failing at the script's 700ms step timeout", r.Reason, r.Message)
	}

	// A step's own timeout is a step failure; the job goes on being usable.
	r = run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "wait_for", "selector": "#missing", "timeout_ms": 300})))
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "step timeout of 300ms (set by the step's timeout_ms) ran out") || !strings.Contains(r.Message, "#missing") {
		t.Fatalf("step timeout: got %q %q, want step_failed saying what it waited for", r.Reason, r.Message)
	}
}

// The script's timeout_ms is the default of each step, not a bound on the
// whole run: three 800 ms steps under "timeout_ms": 2000 take 2.4 s in
// all and pass within the job's 20 s (the run failed "job timed out after
// 2s"). The job's timeout still bounds the run, and says it is --timeout.
func TestScriptTimeoutIsEachStepsDefault(t *testing.T) {
	e := shared(t)
	site := alivePage(t)
	slow := map[string]any{"action": "evaluate", "expression": "new Promise(r=>setTimeout(()=>r(1),800))"}
	b, _ := json.Marshal(map[string]any{"timeout_ms": 2000, "steps": []any{
		map[string]any{"action": "navigate", "url": site + "/"},
		withName(slow, "a"), withName(slow, "b"), withName(slow, "c")}})
	spec := loopbackSpec(b)
	spec.Timeout = 20 * time.Second
	r := run(t, e, spec)
	mustOK(t, r)
	if v := values(t, r); v["a"] != 1.0 || v["b"] != 1.0 || v["c"] != 1.0 {
		t.Fatalf("values %v", v)
	}

	// The same script in a job of 1.5 s runs out of the job's time.
	spec.Timeout = 1500 * time.Millisecond
	r = run(t, e, spec)
	if r.Reason != runtime.ReasonTimeout || !strings.Contains(r.Message, "job timed out after 1.5s (the job's --timeout)") {
		t.Fatalf("a run longer than the job's timeout: got %q %q", r.Reason, r.Message)
	}
}

func withName(m map[string]any, name string) map[string]any {
	out := map[string]any{"name": name}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestInvalidSpec(t *testing.T) {
	e := shared(t)
	r := run(t, e, runtime.Spec{Script: []byte(`{"steps":[{"action":"fly"}]}`)})
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "steps[0]") || !strings.Contains(r.Message, "unknown action") {
		t.Errorf("bad script: got %q %q", r.Reason, r.Message)
	}
	r = run(t, e, runtime.Spec{Script: script(t, map[string]any{"action": "navigate", "url": "https://example.com/"}),
		AllowHosts: []string{"https://example.com/"}})
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "--allow-host") {
		t.Errorf("bad allow_hosts: got %q %q", r.Reason, r.Message)
	}
	if string(r.Stdout) != "{}" {
		t.Errorf("stdout %q, want {}", r.Stdout)
	}
}

func TestNewWithBadExecPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := New(ctx, Config{ExecPath: "/nonexistent/chromium", Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/chromium") || !strings.Contains(err.Error(), "apt-get install") {
		t.Fatalf("got %v, want an error naming the binary and the fix", err)
	}
}
