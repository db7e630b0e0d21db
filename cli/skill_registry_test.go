package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/internal/testbuf"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// threeNodeCluster starts a cluster of three in-process nodes; CLI calls
// through it use the first node's operator credential and whichever
// node's address the test names.
func threeNodeCluster(t *testing.T) (first *cluster, addrs []string) {
	t.Helper()
	first, addrs, _ = threeNodes(t)
	return first, addrs
}

// threeNodes is threeNodeCluster with the two joined nodes' handles (to
// stop one).
func threeNodes(t *testing.T) (first *cluster, addrs []string, joined []*node.Node) {
	t.Helper()
	first = startNode(t)
	cred, err := identity.LoadCredential(first.node.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(first.node.Addr(), cred)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	addrs = []string{first.node.Addr()}
	ctx := context.Background()
	for range 2 {
		resp, err := cl.Identity.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "node"}))
		if err != nil {
			t.Fatal(cl.Explain(err))
		}
		code, err := pairing.Parse(resp.Msg.Code)
		if err != nil {
			t.Fatal(err)
		}
		ncred, pr, err := client.Pair(ctx, first.node.Addr(), code, client.PairOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := node.PrepareJoin(dir, ncred, pr.ClusterName, append([]string{first.node.Addr()}, pr.Peers...), pr.DataKey); err != nil {
			t.Fatal(err)
		}
		n, err := node.Start(ctx, node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 2, BrowserSlots: -1,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WasmCacheDir: sharedWasmCache})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		addrs = append(addrs, n.Addr())
		joined = append(joined, n)
	}
	return first, addrs, joined
}

// on runs a CLI command through the node at addr with the operator
// credential.
func (c *cluster) on(addr string, args ...string) result {
	c.t.Helper()
	return runCLI(c.t, append([]string{"--data-dir", c.dir, "--addr", addr}, args...)...)
}

// TestSkillInstallOnceRunAnywhere: the example skill is installed through
// one node and run through another; its output satisfies the schema;
// input that violates the schema, an untrusted publisher, another key, an
// audit failure and output that violates the schema are each refused with
// the reason.
func TestSkillInstallOnceRunAnywhere(t *testing.T) {
	c, addrs := threeNodeCluster(t)
	a, b, third := addrs[0], addrs[1], addrs[2]
	tmp := t.TempDir()
	dir := exampleSkillDir(t)
	key, other := filepath.Join(tmp, "example.key"), filepath.Join(tmp, "other.key")
	pub := strings.TrimSpace(runCLI(t, "skill", "keygen", "-o", key).stdout)
	runCLI(t, "skill", "keygen", "-o", other)
	pkg := filepath.Join(tmp, "web.palyra-skill")
	if r := runCLI(t, "skill", "pack", dir, "--key", key, "-o", pkg); r.code != 0 {
		t.Fatalf("pack: %q", r.stderr)
	}

	// Not trusted yet.
	if r := c.on(a, "skill", "install", pkg); r.code == 0 || !strings.Contains(r.stderr, "not trusted") || !strings.Contains(r.stderr, "skill trust add example") {
		t.Fatalf("install from an untrusted publisher: %d %q", r.code, r.stderr)
	}
	if r := c.on(a, "skill", "trust", "add", "example", pub); r.code != 0 {
		t.Fatalf("trust add: %q", r.stderr)
	}
	if r := c.on(a, "skill", "install", pkg); r.code != 0 || !strings.Contains(r.stdout, "example.web 1.0.0 installed, active") {
		t.Fatalf("install: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// Listed on every node.
	if r := c.on(third, "skill", "list"); r.code != 0 || !strings.Contains(r.stdout, "example.web") || !strings.Contains(r.stdout, "wordcount,fetch") {
		t.Fatalf("list on the third node: %q %q", r.stdout, r.stderr)
	}

	// Run through another node; the output satisfies the schema.
	r := c.on(b, "skill", "run", "example.web", "wordcount", "--input", `{"text":"to be or not to be"}`, "--wait")
	if r.code != 0 {
		t.Fatalf("run: %d %q %q", r.code, r.stdout, r.stderr)
	}
	var out struct{ Words, Lines, Bytes int }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Words != 6 || out.Lines != 1 || out.Bytes != 18 {
		t.Fatalf("wordcount output %q: %+v %v", r.stdout, out, err)
	}

	// The HTTP-fetch tool, against a site on this machine (a variant of
	// the skill granted 127.0.0.1 and private addresses), run through the
	// third node.
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from the site") }))
	defer site.Close()
	m0, _ := os.ReadFile(filepath.Join(dir, "skill.toml"))
	local := strings.Replace(strings.Replace(string(m0), `skill_id = "example.web"`, `skill_id = "example.local"`, 1),
		`http_hosts = ["example.com"]`, `http_hosts = ["127.0.0.1"]`+"\nallow_private = true", 1)
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	localPkg := filepath.Join(tmp, "local.palyra-skill")
	if r := runCLI(t, "skill", "pack", dir, "--key", key, "-o", localPkg); r.code != 0 {
		t.Fatalf("pack local: %q", r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), m0, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.on(a, "skill", "install", localPkg); r.code != 0 {
		t.Fatalf("install local: %q %q", r.stdout, r.stderr)
	}
	r = c.on(third, "skill", "run", "example.local", "fetch", "--input", `{"url":"`+site.URL+`/"}`, "--wait")
	var fetched struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &fetched); r.code != 0 || err != nil || fetched.Status != 200 || fetched.Body != "hello from the site" {
		t.Fatalf("fetch tool: %d %q %q", r.code, r.stdout, r.stderr)
	}

	// Input that violates the schema stores nothing.
	before := strings.Count(c.on(a, "job", "list").stdout, "\n")
	if r := c.on(b, "skill", "run", "example.web", "wordcount", "--input", `{"txt":1}`); r.code == 0 || !strings.Contains(r.stderr, "does not match the input_schema") {
		t.Fatalf("bad input: %d %q", r.code, r.stderr)
	}
	// Flags the run cannot honour are refused, not bent: a timeout over
	// the skill's limit (the example's is 30s), an approval TTL for a tool
	// that needs no approval.
	if r := c.on(b, "skill", "run", "example.web", "wordcount", "--input", `{"text":"x"}`, "--timeout", "60s"); r.code == 0 || !strings.Contains(r.stderr, "--timeout 1m0s is over example.web's limit of 30s") {
		t.Fatalf("a timeout over the skill's limit: %d %q", r.code, r.stderr)
	}
	if r := c.on(b, "skill", "run", "example.web", "wordcount", "--input", `{"text":"x"}`, "--approval-ttl", "1h"); r.code == 0 || !strings.Contains(r.stderr, "does not require approval") {
		t.Fatalf("an approval TTL for a tool without approval: %d %q", r.code, r.stderr)
	}
	if after := strings.Count(c.on(a, "job", "list").stdout, "\n"); after != before {
		t.Fatalf("a refused run left a job: %d lines in job list, %d before", after, before)
	}
	if r := c.on(b, "skill", "run", "example.web", "nope"); r.code == 0 || !strings.Contains(r.stderr, "its tools: wordcount, fetch") {
		t.Fatalf("unknown tool: %q", r.stderr)
	}

	// The same package signed by another key.
	resigned := filepath.Join(tmp, "resigned.palyra-skill")
	runCLI(t, "skill", "sign", pkg, "--key", other, "-o", resigned)
	if r := c.on(a, "skill", "install", resigned); r.code == 0 || !strings.Contains(r.stderr, "signed with another key") {
		t.Fatalf("install signed by another key: %d %q", r.code, r.stderr)
	}

	// A wildcard capability: installed quarantined, and it does not run.
	m, _ := os.ReadFile(filepath.Join(dir, "skill.toml"))
	wild := strings.Replace(strings.Replace(string(m), `skill_id = "example.web"`, `skill_id = "example.wild"`, 1), `http_hosts = ["example.com"]`, `http_hosts = ["*"]`, 1)
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), []byte(wild), 0o644); err != nil {
		t.Fatal(err)
	}
	wildPkg := filepath.Join(tmp, "wild.palyra-skill")
	if r := runCLI(t, "skill", "pack", dir, "--key", key, "-o", wildPkg); r.code != 0 {
		t.Fatalf("pack wild: %q", r.stderr)
	}
	if r := c.on(a, "skill", "install", wildPkg); r.code == 0 || !strings.Contains(r.stdout, "quarantined") || !strings.Contains(r.stdout, "wildcard") {
		t.Fatalf("install wild: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := c.on(b, "skill", "run", "example.wild", "wordcount", "--input", `{"text":"x"}`); r.code == 0 || !strings.Contains(r.stderr, "quarantined") || !strings.Contains(r.stderr, "wildcard") {
		t.Fatalf("run quarantined: %d %q", r.code, r.stderr)
	}

	// Output that violates the schema fails the run on the worker.
	bad := strings.Replace(string(m), `skill_id = "example.web"`, `skill_id = "example.strict"`, 1)
	bad = strings.Replace(bad, `"required": ["words", "lines", "bytes"]`, `"required": ["words", "lines", "bytes", "sentences"]`, 1)
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	strict := filepath.Join(tmp, "strict.palyra-skill")
	if r := runCLI(t, "skill", "pack", dir, "--key", key, "-o", strict); r.code != 0 {
		t.Fatalf("pack strict: %q", r.stderr)
	}
	if r := c.on(a, "skill", "install", strict); r.code != 0 {
		t.Fatalf("install strict: %q %q", r.stdout, r.stderr)
	}
	r = c.on(third, "skill", "run", "example.strict", "wordcount", "--input", `{"text":"x"}`, "--wait", "--json")
	if r.code == 0 || !strings.Contains(r.stdout, "output_invalid") || !strings.Contains(r.stdout, "sentences") {
		t.Fatalf("output against the schema: %d %q %q", r.code, r.stdout, r.stderr)
	}

	// Disable, enable, remove.
	if r := c.on(a, "skill", "disable", "example.web"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := c.on(b, "skill", "run", "example.web", "wordcount", "--input", `{"text":"x"}`); r.code == 0 || !strings.Contains(r.stderr, "disabled") {
		t.Fatalf("run disabled: %q", r.stderr)
	}
	if r := c.on(a, "skill", "enable", "example.web"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := c.on(b, "skill", "run", "example.web", "wordcount", "--input", `{"text":"x y"}`, "--wait"); r.code != 0 || !strings.Contains(r.stdout, `"words":2`) {
		t.Fatalf("run after enable: %q %q", r.stdout, r.stderr)
	}
	if r := c.on(a, "skill", "remove", "example.web"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := c.on(third, "skill", "get", "example.web"); r.code == 0 || !strings.Contains(r.stderr, "no skill") {
		t.Fatalf("get removed: %q", r.stderr)
	}
}

// TestSkillApprovals: a run of a tool marked requires_approval waits;
// approving runs it, denying ends it with the reason, and one nobody
// decides on expires.
func TestSkillApprovals(t *testing.T) {
	c := startNode(t)
	tmp := t.TempDir()
	dir := exampleSkillDir(t)
	m, _ := os.ReadFile(filepath.Join(dir, "skill.toml"))
	gated := strings.Replace(string(m), `skill_id = "example.web"`, `skill_id = "example.gated"`, 1)
	gated = strings.Replace(gated, "deterministic = true", "deterministic = true\nrequires_approval = true", 1)
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), []byte(gated), 0o644); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(tmp, "k")
	runCLI(t, "skill", "keygen", "-o", key)
	pkg := filepath.Join(tmp, "gated.palyra-skill")
	if r := runCLI(t, "skill", "pack", dir, "--key", key, "-o", pkg); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := c.cli("skill", "install", pkg, "--trust-on-first-use"); r.code != 0 || !strings.Contains(r.stderr, "trusted with key") {
		t.Fatalf("install with trust on first use: %d %q %q", r.code, r.stdout, r.stderr)
	}
	run := func(extra ...string) string {
		t.Helper()
		r := c.cli(append([]string{"skill", "run", "example.gated", "wordcount", "--input", `{"text":"a b c"}`}, extra...)...)
		if r.code != 0 || !strings.Contains(r.stderr, "waits for approval") {
			t.Fatalf("run: %d %q %q", r.code, r.stdout, r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}

	// Approved: it runs.
	id := run()
	if j := c.jobJSON(id); j.Phase != "waiting_for_approval" {
		t.Fatalf("phase %q, want waiting_for_approval", j.Phase)
	}
	// The text view shows an approver what it is and what to do.
	if r := c.cli("job", "get", id); !strings.Contains(r.stdout, "example.gated/wordcount") || !strings.Contains(r.stdout, "palyra job approve "+id) {
		t.Fatalf("job get of a run waiting for approval:\n%s", r.stdout)
	}
	if r := c.cli("job", "approve", id, "--reason", "looks fine"); r.code != 0 {
		t.Fatalf("approve: %q", r.stderr)
	}
	if r := c.cli("job", "get", id); !strings.Contains(r.stdout, "approved: looks fine by ") {
		t.Fatalf("job get of an approved run:\n%s", r.stdout)
	}
	if j := c.waitTerminal(id); j.Phase != "completed" || !strings.Contains(j.Output, `"words":3`) || j.DecidedBy == "" || j.DecisionReason != "looks fine" {
		t.Fatalf("approved run: %+v", j)
	}
	if r := c.cli("job", "approve", id); r.code == 0 || !strings.Contains(r.stderr, "waiting_for_approval") {
		t.Fatalf("approving again: %q", r.stderr)
	}

	// Denied: it ends with the reason.
	id = run()
	if r := c.cli("job", "deny", id); r.code == 0 || !strings.Contains(r.stderr, "reason") {
		t.Fatalf("deny without a reason: %q", r.stderr)
	}
	if r := c.cli("job", "deny", id, "--reason", "not today"); r.code != 0 {
		t.Fatalf("deny: %q", r.stderr)
	}
	if j := c.waitTerminal(id); j.Phase != "aborted" || !strings.Contains(j.Error.Message, "not today") || !strings.Contains(j.Error.Message, "denied by") {
		t.Fatalf("denied run: %+v", j)
	}

	// Nobody decides: it expires.
	id = run("--approval-ttl", "300ms")
	if j := c.waitTerminal(id); j.Phase != "expired" || !strings.Contains(j.Error.Message, "approval expired") {
		t.Fatalf("unapproved run: %+v", j)
	}
}

// TestSkillInstallCannotTakeOverATrustOrAStatus: installing is not
// trusting, not taking another publisher's skill id, not enabling.
// Another publisher's package for an installed id is refused (and pins no
// key with --trust-on-first-use); a version's contents never change; a
// downgrade needs --allow-downgrade; a device allowed skill.install only
// cannot trust a publisher on first use, and its installs are scoped by
// the policy's context (skill_id, publisher); an upgrade keeps an
// operator's quarantine.
func TestSkillInstallCannotTakeOverATrustOrAStatus(t *testing.T) {
	c := startNode(t)
	tmp := t.TempDir()
	dir := exampleSkillDir(t)
	manifest, _ := os.ReadFile(filepath.Join(dir, "skill.toml"))
	keys, pubs := map[string]string{}, map[string]string{}
	for _, pub := range []string{"example", "mallory", "other"} {
		keys[pub] = filepath.Join(tmp, pub+".key")
		pubs[pub] = strings.TrimSpace(runCLI(t, "skill", "keygen", "-o", keys[pub]).stdout)
	}
	// pack writes a variant of the example skill and packs it.
	pack := func(name, publisher, id, version, description string) string {
		t.Helper()
		m := strings.NewReplacer(`publisher = "example"`, `publisher = "`+publisher+`"`, `skill_id = "example.web"`, `skill_id = "`+id+`"`,
			`version = "1.0.0"`, `version = "`+version+`"`, `description = "Count the words of a text;`, `description = "`+description+` Count the words of a text;`).Replace(string(manifest))
		if err := os.WriteFile(filepath.Join(dir, "skill.toml"), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(tmp, name+".palyra-skill")
		if r := runCLI(t, "skill", "pack", dir, "--key", keys[publisher], "-o", out); r.code != 0 {
			t.Fatalf("pack %s: %q", name, r.stderr)
		}
		return out
	}
	trusted := func() string { return c.cli("skill", "trust", "list").stdout }

	if r := c.cli("skill", "install", pack("web", "example", "example.web", "1.0.0", ""), "--trust-on-first-use"); r.code != 0 {
		t.Fatalf("install: %+v", r)
	}
	// The same package again, or the same contents in another zip
	// framing (a header byte changed): nothing to do, nothing recorded.
	journal := func() string { return c.cli("audit", "list", "--json").stdout }
	before := journal()
	web := filepath.Join(tmp, "web.palyra-skill")
	raw, _ := os.ReadFile(web)
	raw[5] ^= 0xff // the local file header's "version needed" byte
	reframed := filepath.Join(tmp, "reframed.palyra-skill")
	os.WriteFile(reframed, raw, 0o644)
	for _, f := range []string{web, reframed} {
		if r := c.cli("skill", "install", f); r.code != 0 || !strings.Contains(r.stdout, "example.web 1.0.0 is installed already, with these contents: nothing changed") {
			t.Fatalf("installing %s again: %+v", filepath.Base(f), r)
		}
	}
	if r := c.cli("skill", "disable", "example.web"); r.code != 0 {
		t.Fatalf("disable: %+v", r)
	}
	mid := journal()
	if r := c.cli("skill", "disable", "example.web"); r.code != 0 || !strings.Contains(r.stdout, "example.web is disabled already: nothing changed") {
		t.Fatalf("disable again: %+v", r)
	}
	if after := journal(); after != mid || strings.Count(mid, "skill.install") != strings.Count(before, "skill.install") {
		t.Fatalf("repeats were recorded:\nbefore %s\nafter %s", before, after)
	}
	if r := c.cli("skill", "enable", "example.web"); r.code != 0 {
		t.Fatalf("enable: %+v", r)
	}
	// Another publisher cannot even pack a skill in example's namespace
	// (example.web, or a new example.other that reads as example's).
	for _, id := range []string{"example.web", "example.other"} {
		m := strings.NewReplacer(`publisher = "example"`, `publisher = "mallory"`, `skill_id = "example.web"`, `skill_id = "`+id+`"`).Replace(string(manifest))
		if err := os.WriteFile(filepath.Join(dir, "skill.toml"), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := runCLI(t, "skill", "pack", dir, "--key", keys["mallory"], "-o", filepath.Join(tmp, "takeover.palyra-skill")); r.code == 0 ||
			!strings.Contains(r.stderr, `skill_id "`+id+`" is not in publisher "mallory"'s namespace: name it mallory.NAME`) {
			t.Fatalf("mallory packing %s: %+v", id, r)
		}
	}
	if strings.Contains(trusted(), "mallory") {
		t.Fatalf("a refused package pinned the publisher's key: %s", trusted())
	}
	if r := c.cli("skill", "install", pack("changed", "example", "example.web", "1.0.0", "Changed."), "--trust-on-first-use"); r.code == 0 || !strings.Contains(r.stderr, "contents do not change") {
		t.Fatalf("the same version with other contents: %+v", r)
	}
	if r := c.cli("skill", "install", pack("v110", "example", "example.web", "1.1.0", "")); r.code != 0 || !strings.Contains(r.stdout, "example.web 1.1.0 installed (replacing 1.0.0), active") {
		t.Fatalf("upgrade: %+v", r)
	}
	old := filepath.Join(tmp, "web.palyra-skill")
	if r := c.cli("skill", "install", old); r.code == 0 || !strings.Contains(r.stderr, "--allow-downgrade") {
		t.Fatalf("downgrade: %+v", r)
	}
	if r := c.cli("skill", "install", old, "--allow-downgrade"); r.code != 0 || !strings.Contains(r.stdout, "1.0.0 installed (replacing 1.1.0)") {
		t.Fatalf("allowed downgrade: %+v", r)
	}

	// A device may install example's and mallory's skills, nothing else,
	// and trust nobody.
	cfg, id := c.pairDevice("ci")
	pol := c.cli("policy", "get").stdout + "\n@id(\"ci-installs\")\npermit (principal == Palyra::Device::\"" + id +
		"\", action == Palyra::Action::\"skill.install\", resource) when { context has publisher && (context.publisher == \"example\" || context.publisher == \"mallory\") };\n"
	file := filepath.Join(t.TempDir(), "p.cedar")
	os.WriteFile(file, []byte(pol), 0o600)
	if r := c.cli("policy", "set", file); r.code != 0 {
		t.Fatalf("policy set: %+v", r)
	}
	if r := device(t, cfg, "skill", "install", pack("mal", "mallory", "mallory.tools", "1.0.0", ""), "--trust-on-first-use"); r.code == 0 || !strings.Contains(r.stderr, "skill.trust") {
		t.Fatalf("trust on first use by a device without skill.trust: %+v", r)
	}
	if strings.Contains(trusted(), "mallory") {
		t.Fatalf("the device pinned a publisher's key: %s", trusted())
	}
	if r := c.cli("skill", "trust", "add", "other", pubs["other"]); r.code != 0 {
		t.Fatalf("trust other: %+v", r)
	}
	if r := device(t, cfg, "skill", "install", pack("oth", "other", "other.tools", "1.0.0", "")); r.code == 0 || !strings.Contains(r.stderr, "skill.install") {
		t.Fatalf("an install outside the device's policy scope: %+v", r)
	}

	// A device's run asks for the tool's declared grants, and the denial
	// says where they come from; the pure tool, whose manifest table
	// narrows them to none, asks for nothing (it asked for grant.http on
	// example.com, as the skill's other tool does).
	if r := device(t, cfg, "skill", "run", "example.web", "fetch", "--input", `{"url":"https://example.com/"}`); r.code == 0 ||
		!strings.Contains(r.stderr, "grant.http") || !strings.Contains(r.stderr, "a run of example.web/fetch asks for the capabilities its manifest declares: hosts [example.com]") {
		t.Fatalf("a device's run of a tool declaring hosts: %+v", r)
	}
	if r := device(t, cfg, "skill", "run", "example.web", "wordcount", "--input", `{"text":"a b"}`, "--wait"); r.code != 0 || !strings.Contains(r.stdout, `"words":2`) {
		t.Fatalf("a device's run of the pure tool: %+v", r)
	}
	if r := c.cli("skill", "get", "example.web"); !strings.Contains(r.stdout, "grants        none (its runs ask for no grants)") {
		t.Fatalf("skill get does not show the pure tool's grants: %s", r.stdout)
	}

	// An operator's quarantine survives the device's upgrade.
	if r := c.cli("skill", "quarantine", "example.web", "--reason", "security hold"); r.code != 0 {
		t.Fatalf("quarantine: %+v", r)
	}
	r := device(t, cfg, "skill", "install", pack("v120", "example", "example.web", "1.2.0", ""))
	if r.code == 0 || !strings.Contains(r.stdout, "1.2.0 installed (replacing 1.0.0), quarantined") || !strings.Contains(r.stderr, "skill enable example.web") {
		t.Fatalf("upgrade of a quarantined skill: %+v", r)
	}
	var got struct {
		Status, Version string
		Findings        []string
	}
	if err := json.Unmarshal([]byte(c.cli("skill", "get", "example.web", "--json").stdout), &got); err != nil || got.Status != "quarantined" ||
		got.Version != "1.2.0" || !slices.Contains(got.Findings, "operator: security hold") {
		t.Fatalf("after the upgrade: %v %+v", err, got)
	}
	if r := c.cli("skill", "install", pack("v130", "example", "example.web", "1.3.0", ""), "--json"); r.code == 0 {
		t.Fatalf("--json install of a skill left quarantined exits 0: %+v", r)
	}
}

// TestJobWatchOutlivesItsNode: 'job watch' through a node that stops goes
// on through another node (the credential knows several addresses), says
// so once, and ends with the job's result; before, it died with a
// transport error while the job went on.
func TestJobWatchOutlivesItsNode(t *testing.T) {
	c, addrs, joined := threeNodes(t)
	gone := joined[1] // serves addrs[2]; runs none of the job
	if r := c.on(addrs[0], "node", "drain", gone.ID()); r.code != 0 {
		t.Fatalf("drain: %+v", r)
	}
	r := c.on(addrs[0], "job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--input", "4s")
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	var out, errb testbuf.Buffer
	done := make(chan int, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- run(ctx, []string{"palyra", "--data-dir", c.dir, "--addr", addrs[2] + "," + addrs[0], "job", "watch", id}, strings.NewReader(""), &out, &errb)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "running") { // the watch has the job running
		if time.Now().After(deadline) {
			t.Fatalf("the watch printed no running state: %q %q", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	gone.Close()
	w := result{<-done, out.String(), errb.String()}
	if w.code != 0 || !strings.Contains(w.stdout, "running") || !strings.Contains(w.stdout, "completed") ||
		!strings.Contains(w.stderr, "following "+id+" again") {
		t.Fatalf("watch through a node that stopped: %+v", w)
	}
	if n := strings.Count(w.stdout, "running"); n != 1 {
		t.Fatalf("the running state was printed %d times:\n%s", n, w.stdout)
	}
}
