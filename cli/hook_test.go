package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// packExample packs examples/skills/NAME with the given tools built and
// signed with key.
func packExample(t *testing.T, name, key string, tools ...string) string {
	t.Helper()
	return packExampleWith(t, name, key, nil, tools...)
}

// packExampleWith is packExample with the manifest passed through edit.
func packExampleWith(t *testing.T, name, key string, edit func(string) string, tools ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join("..", "examples", "skills", name, "skill.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		m = []byte(edit(string(m)))
	}
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), m, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		if err := os.WriteFile(filepath.Join(dir, "modules", tool+".wasm"), testwasm.Build(t, tool), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), name+".palyra-skill")
	if r := runCLI(t, "skill", "pack", dir, "--key", key, "-o", out); r.code != 0 {
		t.Fatalf("pack %s: %q", name, r.stderr)
	}
	return out
}

// TestHooksBeforeAndAfterRun: a before_run hook blocks a job before it is
// accepted, annotates another, makes one that asks for egress wait for
// approval; an after_run hook runs once per finished job with the job as
// its input.
func TestHooksBeforeAndAfterRun(t *testing.T) {
	c := startNode(t)
	key := filepath.Join(t.TempDir(), "k")
	runCLI(t, "skill", "keygen", "-o", key)
	guard := packExample(t, "guard", key, "gate")
	web := packExample(t, "web", key, "wordcount", "fetchjson")
	if r := c.cli("skill", "install", guard, "--trust-on-first-use"); r.code != 0 {
		t.Fatalf("install guard: %q %q", r.stdout, r.stderr)
	}
	if r := c.cli("skill", "install", web); r.code != 0 {
		t.Fatalf("install web: %q %q", r.stdout, r.stderr)
	}
	before := c.cli("hook", "bind", "before_run", "example.guard", "gate")
	after := c.cli("hook", "bind", "after_run", "example.guard", "gate")
	if before.code != 0 || after.code != 0 {
		t.Fatalf("bind: %q %q", before.stderr, after.stderr)
	}
	beforeID := strings.SplitN(before.stdout, ":", 2)[0]
	afterID := strings.SplitN(after.stdout, ":", 2)[0]
	if r := c.cli("hook", "bind", "before_run", "example.guard", "gate"); r.code == 0 || !strings.Contains(r.stderr, "hook "+beforeID+" binds before_run to example.guard/gate already") {
		t.Fatalf("the same binding again: %+v", r)
	}
	if r := c.cli("hook", "list"); !strings.Contains(r.stdout, beforeID) || !strings.Contains(r.stdout, "after_run") {
		t.Fatalf("hook list: %q", r.stdout)
	}

	// Blocked: over 100 bytes of input.
	reverse := testwasm.Path(t, "reverse")
	r := c.cli("job", "submit", "--wasm", reverse, "--input", strings.Repeat("x", 200), "--wait")
	if r.code == 0 || !strings.Contains(r.stderr, "blocked") || !strings.Contains(r.stderr, "over gate's 100") {
		t.Fatalf("large input: %d %q %q", r.code, r.stdout, r.stderr)
	}

	// Annotated, and it runs.
	r = c.cli("job", "submit", "--wasm", reverse, "--input", "hello")
	if r.code != 0 {
		t.Fatalf("small input: %q", r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	j := c.waitTerminal(id)
	if j.Phase != "completed" || j.Output != "olleh" || len(j.Annotations) != 1 || !strings.Contains(j.Annotations[0], "checked by gate") {
		t.Fatalf("annotated job: %+v", j)
	}
	// The after_run hook ran once, with the job as its input.
	hk := c.waitTerminal("hk-" + afterID + "-" + id)
	if hk.Phase != "completed" || !strings.Contains(hk.Output, `"seen":"`+id+`"`) || !strings.Contains(hk.Output, `"phase":"completed"`) || hk.HookID != afterID {
		t.Fatalf("after_run hook job: %+v", hk)
	}

	// A submission sent again with its key (what the CLI does when an
	// answer is lost) is answered with the job it made, without asking
	// the before_run hook again: its hook jobs are not made twice.
	hookJobs := func() int {
		t.Helper()
		r := c.cli("job", "list", "--json", "--limit", "1000")
		var list struct{ Jobs []jobJSON }
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatalf("job list --json: %v %+v", err, r)
		}
		n := 0
		for _, j := range list.Jobs {
			if j.HookID == beforeID {
				n++
			}
		}
		return n
	}
	again := []string{"job", "submit", "--wasm", reverse, "--input", "again", "--idempotency-key", "resend-1"}
	r = c.cli(again...)
	if r.code != 0 {
		t.Fatalf("keyed submission: %+v", r)
	}
	first, asked := strings.TrimSpace(r.stdout), hookJobs()
	if r = c.cli(again...); r.code != 0 || strings.TrimSpace(r.stdout) != first {
		t.Fatalf("the same keyed submission again: %+v; want %s", r, first)
	}
	if n := hookJobs(); n != asked {
		t.Fatalf("the before_run hook was asked again for a replayed submission: %d hook jobs, %d before", n, asked)
	}

	// Egress asks for a person.
	r = c.cli("skill", "run", "example.web", "fetch", "--input", `{"url":"https://example.com/"}`)
	if r.code != 0 || !strings.Contains(r.stderr, "waits for approval") {
		t.Fatalf("egress run: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if j := c.jobJSON(strings.TrimSpace(r.stdout)); j.Phase != "waiting_for_approval" {
		t.Fatalf("egress run phase %q", j.Phase)
	}

	// Unbound: the large input goes through.
	if r := c.cli("hook", "unbind", beforeID); r.code != 0 {
		t.Fatal(r.stderr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = c.cli("job", "submit", "--wasm", reverse, "--input", strings.Repeat("x", 200))
		if r.code == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.code != 0 {
		t.Fatalf("after unbind: %q", r.stderr)
	}
}

// TestSkillWithHooksIsNotDisabledOrRemoved: a skill that a hook is bound
// to is not disabled or removed (that left every 'job submit' failing
// with "could not decide"); the error names the hook and the fix, and
// --force unbinds it, saying so, and jobs keep being accepted.
func TestSkillWithHooksIsNotDisabledOrRemoved(t *testing.T) {
	c := startNode(t)
	key := filepath.Join(t.TempDir(), "k")
	runCLI(t, "skill", "keygen", "-o", key)
	guard := packExample(t, "guard", key, "gate")
	if r := c.cli("skill", "install", guard, "--trust-on-first-use"); r.code != 0 {
		t.Fatalf("install guard: %q %q", r.stdout, r.stderr)
	}
	bound := c.cli("hook", "bind", "before_run", "example.guard", "gate")
	if bound.code != 0 {
		t.Fatal(bound.stderr)
	}
	hookID := strings.SplitN(bound.stdout, ":", 2)[0]
	for _, verb := range []string{"disable", "remove"} {
		r := c.cli("skill", verb, "example.guard")
		if r.code == 0 || !strings.Contains(r.stderr, hookID+" (before_run -> gate)") || !strings.Contains(r.stderr, "palyra hook unbind HOOK_ID") || !strings.Contains(r.stderr, "--force") {
			t.Fatalf("skill %s with a hook bound: %d %q %q", verb, r.code, r.stdout, r.stderr)
		}
	}
	reverse := testwasm.Path(t, "reverse")
	if r := c.cli("job", "submit", "--wasm", reverse, "--input", "hello", "--wait"); r.code != 0 || !strings.Contains(r.stdout, "olleh") {
		t.Fatalf("submit after refused disable/remove: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r := c.cli("skill", "remove", "example.guard", "--force")
	// The skill is gone: binding the hook again needs it installed first.
	if r.code != 0 || !strings.Contains(r.stdout, "example.guard removed") || !strings.Contains(r.stdout, "hook "+hookID+" unbound") ||
		!strings.Contains(r.stdout, "once the skill is installed again, bind it with") {
		t.Fatalf("remove --force: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := c.cli("hook", "list"); strings.Contains(r.stdout, hookID) {
		t.Fatalf("hook list after remove --force: %q", r.stdout)
	}
	// An object holding an empty list (not null), as every list is.
	for args, want := range map[string]string{"hook": `"hooks": []`, "skill": `"skills": []`} {
		if r := c.cli(args, "list", "--json"); !strings.HasPrefix(strings.TrimSpace(r.stdout), "{") || !strings.Contains(r.stdout, want) {
			t.Fatalf("%s list --json with nothing to list: %q", args, r.stdout)
		}
	}
	if r := c.cli("job", "submit", "--wasm", reverse, "--input", strings.Repeat("x", 200), "--wait"); r.code != 0 {
		t.Fatalf("submit after remove --force: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestHookInputIsCheckedAgainstTheToolsSchema: a hook's input is checked
// against its tool's input_schema like a skill run's. example.web's
// wordcount takes {"text"} only: binding it as a hook is refused (it could
// never run as one). A version whose wordcount took anything was bound,
// then upgraded to the strict one: as an after_run hook, its hook job
// fails input_invalid without running (the job stays completed); as a
// before_run hook, the submission is refused naming the hook and the error.
func TestHookInputIsCheckedAgainstTheToolsSchema(t *testing.T) {
	c := startNode(t)
	key := filepath.Join(t.TempDir(), "k")
	runCLI(t, "skill", "keygen", "-o", key)
	strict := func(version string) string {
		return packExampleWith(t, "web", key, func(m string) string {
			return strings.Replace(m, `version = "1.0.0"`, `version = "`+version+`"`, 1)
		}, "wordcount", "fetchjson")
	}
	loose := func(version string) string {
		return packExampleWith(t, "web", key, func(m string) string {
			m = strings.Replace(m, `version = "1.0.0"`, `version = "`+version+`"`, 1)
			return strings.Replace(m, `{"type": "object", "properties": {"text": {"type": "string", "maxLength": 1000000}},
 "required": ["text"], "additionalProperties": false}`, `{"type": "object"}`, 1)
		}, "wordcount", "fetchjson")
	}
	install := func(pkg string) {
		t.Helper()
		if r := c.cli("skill", "install", pkg, "--trust-on-first-use"); r.code != 0 {
			t.Fatalf("install: %q %q", r.stdout, r.stderr)
		}
	}
	install(strict("1.0.0"))
	for _, event := range []string{"after_run", "before_run"} {
		if r := c.cli("hook", "bind", event, "example.web", "wordcount"); r.code == 0 || !strings.Contains(r.stderr, "does not take "+event+" events") || !strings.Contains(r.stderr, "examples/skills/guard") {
			t.Fatalf("binding a tool that refuses %s input: %+v", event, r)
		}
	}

	install(loose("1.1.0"))
	after := c.cli("hook", "bind", "after_run", "example.web", "wordcount")
	if after.code != 0 {
		t.Fatal(after.stderr)
	}
	afterID := strings.SplitN(after.stdout, ":", 2)[0]
	install(strict("1.2.0"))
	reverse := testwasm.Path(t, "reverse")
	r := c.cli("job", "submit", "--wasm", reverse, "--input", "hello")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("submit: %d %q", r.code, r.stderr)
	}
	if j := c.waitTerminal(id); j.Phase != "completed" || j.Output != "olleh" {
		t.Fatalf("the job: %+v", j)
	}
	hk := c.waitTerminal("hk-" + afterID + "-" + id)
	if hk.Phase != "failed" || hk.Error == nil || hk.Error.Code != "input_invalid" || !strings.Contains(hk.Error.Message, "input_schema") {
		t.Fatalf("after_run hook job with input its tool refuses: %+v %+v", hk, hk.Error)
	}
	if j := c.jobJSON(id); j.Phase != "completed" {
		t.Fatalf("the job itself: %+v", j)
	}
	if r := c.cli("hook", "unbind", afterID); r.code != 0 {
		t.Fatal(r.stderr)
	}

	install(loose("1.3.0"))
	before := c.cli("hook", "bind", "before_run", "example.web", "wordcount")
	if before.code != 0 {
		t.Fatal(before.stderr)
	}
	beforeID := strings.SplitN(before.stdout, ":", 2)[0]
	install(strict("1.4.0"))
	r = c.cli("job", "submit", "--wasm", reverse, "--input", "hello")
	if r.code == 0 || !strings.Contains(r.stderr, beforeID) || !strings.Contains(r.stderr, "input_schema of example.web/wordcount") || !strings.Contains(r.stderr, "not accepted") {
		t.Fatalf("before_run hook with input its tool refuses: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestSubmitWaitHeldForApprovalSaysHowItGoesOn: 'job submit --wait' held
// by a before_run hook's request_approval says how the job goes on, as
// 'skill run' does, worded for a caller who may not decide: who can, and
// the commands.
func TestSubmitWaitHeldForApprovalSaysHowItGoesOn(t *testing.T) {
	c := startNode(t)
	key := filepath.Join(t.TempDir(), "k")
	runCLI(t, "skill", "keygen", "-o", key)
	guard := packExample(t, "guard", key, "gate")
	if r := c.cli("skill", "install", guard, "--trust-on-first-use"); r.code != 0 {
		t.Fatalf("install guard: %q %q", r.stdout, r.stderr)
	}
	if r := c.cli("hook", "bind", "before_run", "example.guard", "gate"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, extra := range [][]string{nil, {"--idempotency-key", "k1"}} { // RunJob, and Submit then watch
		args := append([]string{"job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "hi", "--allow-host", "example.com", "--wait", "--wait-timeout", "2s"}, extra...)
		r := c.cli(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "waits for approval: an operator") || !strings.Contains(r.stderr, "can approve it with 'palyra job approve j-") ||
			!strings.Contains(r.stderr, "'palyra job deny j-") || strings.Count(r.stderr, "waits for approval") != 1 {
			t.Fatalf("%v: %d %q %q", extra, r.code, r.stdout, r.stderr)
		}
	}
}

// A hook's jobs run with its tool's grants whoever's job fires it, so the
// policy is asked for them when the hook is bound (for the binder) and a
// policy that would forbid a bound hook's binder those grants is refused,
// naming the hook. A hook bound under a forbid on a secret read that
// secret on every job.
func TestHookGrantsAreAskedOfThePolicy(t *testing.T) {
	c := startNode(t)
	key := filepath.Join(t.TempDir(), "k")
	runCLI(t, "skill", "keygen", "-o", key)
	guard := packExampleWith(t, "guard", key, func(m string) string {
		return strings.Replace(m, "wall_clock_ms = 10000", "wall_clock_ms = 10000\nsecrets = [\"tok1\"]", 1)
	}, "gate")
	if r := c.cli("skill", "install", guard, "--trust-on-first-use"); r.code != 0 {
		t.Fatalf("install guard: %+v", r)
	}
	def := c.cli("policy", "get").stdout
	forbid := def + "\n@id(\"no-tok1\")\nforbid (principal, action == Palyra::Action::\"grant.secret\", resource == Palyra::Grant::\"tok1\");\n"
	setPolicy := func(src string) result {
		f := filepath.Join(t.TempDir(), "p.cedar")
		if err := os.WriteFile(f, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return c.cli("policy", "set", f)
	}
	if r := setPolicy(forbid); r.code != 0 {
		t.Fatalf("policy set: %+v", r)
	}
	r := c.cli("hook", "bind", "after_run", "example.guard", "gate")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no-tok1") || !strings.Contains(r.stderr, "with secret tok1") {
		t.Fatalf("binding a hook whose tool reads a secret the policy forbids: %+v; want it refused naming the forbid and the grant", r)
	}
	if r := setPolicy(def); r.code != 0 {
		t.Fatalf("policy set back: %+v", r)
	}
	r = c.cli("hook", "bind", "after_run", "example.guard", "gate", "--json")
	var h struct{ ID string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &h) != nil || h.ID == "" {
		t.Fatalf("hook bind under a policy that allows the grant: %+v", r)
	}
	r = setPolicy(forbid)
	if r.code != exitFailure || !strings.Contains(r.stderr, "hook "+h.ID) || !strings.Contains(r.stderr, "palyra hook unbind "+h.ID) {
		t.Fatalf("a policy forbidding a bound hook's grant: %+v; want it refused naming the hook and how to unbind it", r)
	}
}

// A before_run hook that runs out of time says the bound is the hook's
// (its skill's wall_clock_ms), not the submitter's --timeout, which it
// told the submitter to raise.
func TestBeforeRunHookTimeoutNamesItsBound(t *testing.T) {
	c := startNode(t)
	key := filepath.Join(t.TempDir(), "k")
	runCLI(t, "skill", "keygen", "-o", key)
	slow := packExampleWith(t, "guard", key, func(m string) string {
		m = strings.Replace(m, "wall_clock_ms = 10000", "wall_clock_ms = 1000", 1)
		return strings.Replace(m, `module = "modules/gate.wasm"`, `module = "modules/spin.wasm"`, 1)
	}, "spin")
	if r := c.cli("skill", "install", slow, "--trust-on-first-use"); r.code != 0 {
		t.Fatalf("install: %+v", r)
	}
	if r := c.cli("hook", "bind", "before_run", "example.guard", "gate"); r.code != 0 {
		t.Fatalf("bind: %+v", r)
	}
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "x")
	if r.code == 0 || !strings.Contains(r.stderr, "a before_run hook runs for at most 1s") || strings.Contains(r.stderr, "raise it with --timeout") {
		t.Fatalf("a job under a hook that times out: %+v; want the hook's bound named, not --timeout", r)
	}
}

// An upgrade of a hooked skill whose new tool asks for a grant the
// policy forbids the hook's binder is refused, naming the hook: the hook
// would have read the secret on every job, asked of nobody.
func TestHookedSkillUpgradeKeepsTheGrantPolicy(t *testing.T) {
	c := startNode(t)
	key := filepath.Join(t.TempDir(), "k")
	runCLI(t, "skill", "keygen", "-o", key)
	v1 := packExample(t, "guard", key, "gate")
	v2 := packExampleWith(t, "guard", key, func(m string) string {
		m = strings.Replace(m, `version = "1.0.0"`, `version = "1.1.0"`, 1)
		return strings.Replace(m, "wall_clock_ms = 10000", "wall_clock_ms = 10000\nsecrets = [\"tok1\"]", 1)
	}, "gate")
	if r := c.cli("skill", "install", v1, "--trust-on-first-use"); r.code != 0 {
		t.Fatalf("install v1: %+v", r)
	}
	f := filepath.Join(t.TempDir(), "p.cedar")
	os.WriteFile(f, []byte(c.cli("policy", "get").stdout+"\n@id(\"no-tok1\")\nforbid (principal, action == Palyra::Action::\"grant.secret\", resource == Palyra::Grant::\"tok1\");\n"), 0o600)
	if r := c.cli("policy", "set", f); r.code != 0 {
		t.Fatalf("policy set: %+v", r)
	}
	r := c.cli("hook", "bind", "after_run", "example.guard", "gate", "--json")
	var h struct{ ID string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &h) != nil {
		t.Fatalf("bind v1's tool (no grants): %+v", r)
	}
	r = c.cli("skill", "install", v2)
	if r.code == 0 || !strings.Contains(r.stderr, "hook "+h.ID) || !strings.Contains(r.stderr, "with secret tok1") || !strings.Contains(r.stderr, "no-tok1") {
		t.Fatalf("upgrade to a version whose hooked tool reads a forbidden secret: %+v; want it refused naming the hook", r)
	}
}
