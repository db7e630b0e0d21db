package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
)

// cluster is one in-process node and a way to run CLI commands against it.
type cluster struct {
	t    *testing.T
	node *node.Node
	dir  string
}

// sharedWasmCache is the compilation cache of every node these tests
// start: a Go guest compiles once per machine, not once per test (a cold
// compile takes ~15 s under -race).
var sharedWasmCache = filepath.Join(os.TempDir(), "palyra-cli-test-compile-cache")

func startNode(t *testing.T) *cluster {
	t.Helper()
	return startNodeWith(t, node.Config{})
}

// startNodeWith starts a one-node cluster with cfg's CertTTL and
// HostCallTimeout.
func startNodeWith(t *testing.T, cfg node.Config) *cluster {
	t.Helper()
	dir := t.TempDir()
	n, err := node.Start(context.Background(), node.Config{
		DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 2, BrowserSlots: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WasmCacheDir: sharedWasmCache,
		CertTTL: cfg.CertTTL, HostCallTimeout: cfg.HostCallTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return &cluster{t: t, node: n, dir: dir}
}

type result struct {
	code           int
	stdout, stderr string
}

// cli runs a palyra command against the node (data dir and address set).
func (c *cluster) cli(args ...string) result {
	c.t.Helper()
	return runCLI(c.t, append([]string{"--data-dir", c.dir, "--addr", c.node.Addr()}, args...)...)
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, append([]string{"palyra"}, args...), strings.NewReader(""), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func (c *cluster) jobJSON(id string) jobJSON {
	c.t.Helper()
	r := c.cli("job", "get", id, "--json")
	if r.code != 0 {
		c.t.Fatalf("job get %s: %+v", id, r)
	}
	var j jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		c.t.Fatalf("job get json: %v\n%s", err, r.stdout)
	}
	return j
}

func TestSubmitWaitReverse(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "hello", "--wait")
	if r.code != 0 || r.stdout != "olleh" {
		t.Fatalf("submit --wait: %+v", r)
	}
	// Without --wait: the id alone on stdout; the job is durable already.
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "abc")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "j-") {
		t.Fatalf("submit: %+v", r)
	}
	j := c.waitTerminal(id)
	if j.Phase != "completed" || j.Output != "cba" || j.Error != nil || j.Attempt != 1 || j.NodeID != c.node.ID() {
		t.Fatalf("job: %+v", j)
	}
	// Status reports the counts.
	r = c.cli("status", "--json")
	var st map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status: %v %+v", err, r)
	}
	for _, k := range []string{"node_id", "address", "leader_id", "term", "commit_index"} {
		if _, ok := st[k]; !ok {
			t.Errorf("status lacks %s", k)
		}
	}
	if st["node_id"] != c.node.ID() || st["leader_id"] != c.node.ID() {
		t.Fatalf("status: %v", st)
	}
	if jobs := st["jobs"].(map[string]any); jobs["completed"].(float64) != 2 {
		t.Fatalf("status jobs: %v", jobs)
	}
	// List, filtered by phase, case-insensitively.
	r = c.cli("job", "list", "--phase", "COMPLETED", "--json")
	var list struct{ Jobs []jobJSON }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Jobs) != 2 {
		t.Fatalf("list: %v %+v", err, r)
	}
}

func (c *cluster) waitTerminal(id string) jobJSON {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j := c.jobJSON(id)
		switch j.Phase {
		case "completed", "failed", "aborted", "expired":
			return j
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("job %s still %s", id, j.Phase)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLimitsFailJobsAndNodeKeepsServing(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "spin"), "--timeout", "1s", "--fuel", "4611686018427387904", "--wait", "--json")
	if r.code != 1 {
		t.Fatalf("spin: want exit 1, got %+v", r)
	}
	var j jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	if j.Phase != "failed" || j.Error == nil || j.Error.Code != "timeout" || !strings.Contains(r.stderr, "timed out") {
		t.Fatalf("spin job: %+v stderr=%q", j, r.stderr)
	}
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "membomb"), "--memory", "16MiB", "--wait", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	if r.code != 1 || j.Phase != "failed" || j.Error == nil || j.Error.Code != "memory_limit" {
		t.Fatalf("membomb: %+v", j)
	}
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "still here", "--wait")
	if r.code != 0 || r.stdout != "ereh llits" {
		t.Fatalf("node stopped serving: %+v", r)
	}
}

func TestBadInputIsRefusedAndNothingStored(t *testing.T) {
	c := startNode(t)
	garbage := filepath.Join(t.TempDir(), "garbage.wasm")
	os.WriteFile(garbage, []byte("this is not wasm at all, just text"), 0o600)
	blobsBefore := countFiles(t, c.node.Layout().BlobDir())

	cases := []struct {
		name  string
		args  []string
		code  int
		inErr string
	}{
		{"garbage", []string{"job", "submit", "--wasm", garbage}, 1, "not a WebAssembly module"},
		{"missing file", []string{"job", "submit", "--wasm", "/nonexistent.wasm"}, 1, "cannot read module"},
		{"no --wasm", []string{"job", "submit"}, 2, "exactly one of --wasm"},
		{"both inputs", []string{"job", "submit", "--wasm", garbage, "--input", "a", "--input-file", garbage}, 2, "either --input or --input-file"},
		{"bad memory", []string{"job", "submit", "--wasm", garbage, "--memory", "lots"}, 2, "not a size"},
		{"unknown job", []string{"job", "get", "j-doesnotexist"}, 1, "job ids are j- and 16 hex digits"},
		{"cancel unknown", []string{"job", "cancel", "j-doesnotexist"}, 1, "no job with id"},
		{"bad phase", []string{"job", "list", "--phase", "sleeping"}, 2, "unknown job phase"},
		{"get without id", []string{"job", "get"}, 2, "exactly one argument"},
	}
	for _, tc := range cases {
		r := c.cli(tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.inErr) {
			t.Errorf("%s: want exit %d and %q, got %+v", tc.name, tc.code, tc.inErr, r)
		}
	}
	big := filepath.Join(t.TempDir(), "big")
	os.WriteFile(big, bytes.Repeat([]byte("x"), 2<<20), 0o600)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input-file", big)
	if r.code != 1 || !strings.Contains(r.stderr, "input is 2.0 MiB; the limit is 1.0 MiB") {
		t.Fatalf("big input: %+v", r)
	}
	// Files and streams far over the limits are refused without being read
	// whole (a 3 GiB input crashed the CLI out of memory).
	huge := filepath.Join(t.TempDir(), "huge")
	if err := os.WriteFile(huge, nil, 0o600); err != nil || os.Truncate(huge, 3<<30) != nil {
		t.Fatal("sparse file")
	}
	hugeDir := t.TempDir()
	os.WriteFile(filepath.Join(hugeDir, "a.txt"), []byte("a"), 0o600)
	os.WriteFile(filepath.Join(hugeDir, ".DS_Store"), []byte("hidden"), 0o600)
	os.Symlink(huge, filepath.Join(hugeDir, "b.bin"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--input-file", huge}, "input is 3.0 GiB; the limit is 1.0 MiB (" + huge + ")"},
		{[]string{"--input-file", "/dev/zero"}, "input is more than 1.0 MiB, the limit (/dev/zero)"},
		{[]string{"--inputs", "/dev/zero"}, "more than 128.0 MiB of inputs"},
		{[]string{"--input-dir", hugeDir}, "b.bin is 3.0 GiB; the limit is 1.0 MiB per task"},
	} {
		r := c.cli(append([]string{"job", "submit", "--wasm", testwasm.Path(t, "reverse")}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: want exit 1 and %q, got %+v", tc.args, tc.want, r)
		}
	}
	if r := c.cli("job", "list", "--json"); !strings.Contains(r.stdout, `"jobs": []`) {
		t.Fatalf("refused submissions created jobs: %s", r.stdout)
	}
	if after := countFiles(t, c.node.Layout().BlobDir()); after != blobsBefore {
		t.Fatalf("refused submissions stored blobs: %d → %d", blobsBefore, after)
	}
	// The node is healthy afterwards.
	if r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "ok", "--wait"); r.code != 0 || r.stdout != "ko" {
		t.Fatalf("after bad input: %+v", r)
	}
	// Hidden files in an --input-dir are skipped.
	os.Remove(filepath.Join(hugeDir, "b.bin"))
	if r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input-dir", hugeDir, "--wait"); r.code != 0 || strings.TrimSpace(r.stdout) != "a" {
		t.Fatalf("--input-dir with a hidden file (skipped): %+v", r)
	}
}

func countFiles(t *testing.T, dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func TestCancelStopsRunningJob(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "spin"), "--timeout", "1m", "--fuel", "4611686018427387904")
	id := strings.TrimSpace(r.stdout)
	deadline := time.Now().Add(20 * time.Second)
	for c.jobJSON(id).Phase != "running" {
		if time.Now().After(deadline) {
			t.Fatal("job never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := c.cli("job", "cancel", id); r.code != 0 || !strings.Contains(r.stdout, "aborted") {
		t.Fatalf("cancel: %+v", r)
	}
	if j := c.jobJSON(id); j.Phase != "aborted" || j.Error == nil || j.Error.Code != "aborted" {
		t.Fatalf("after cancel: %+v", j)
	}
	// The spinning instance is stopped: a slot frees and the next job runs
	// even with every other slot busy.
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "spin"), "--timeout", "1m", "--fuel", "4611686018427387904")
	id2 := strings.TrimSpace(r.stdout)
	if r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "x", "--wait"); r.code != 0 {
		t.Fatalf("slot not freed by cancel: %+v", r)
	}
	c.cli("job", "cancel", id2)
}

func TestUnreachableAndForeignCluster(t *testing.T) {
	c := startNode(t)
	r := runCLI(t, "--data-dir", c.dir, "--addr", "127.0.0.1:1", "status")
	if r.code != 1 || !strings.Contains(r.stderr, "no palyra node answered at 127.0.0.1:1") || !strings.Contains(r.stderr, "hint:") {
		t.Fatalf("unreachable: %+v", r)
	}
	other := startNode(t) // a second, unrelated cluster
	r = runCLI(t, "--data-dir", other.dir, "--addr", c.node.Addr(), "status")
	if r.code != 1 || !strings.Contains(r.stderr, "do not trust each other") {
		t.Fatalf("foreign credential accepted or unclear: %+v", r)
	}
	r = runCLI(t, "--data-dir", t.TempDir(), "--addr", c.node.Addr(), "status")
	if r.code != 1 || !strings.Contains(r.stderr, "no operator credential") {
		t.Fatalf("no credential: %+v", r)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"1048576": 1 << 20, "64MiB": 64 << 20, "16M": 16 << 20, "1GiB": 1 << 30, "1.5KiB": 1536, "2MB": 2e6} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "12 parsecs", "-1", "0"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestInterspersedFlags(t *testing.T) {
	app := newApp(nil, io.Discard, io.Discard)
	got := interspersed(app, []string{"palyra", "--data-dir", "d", "job", "get", "ID", "--json"})
	want := []string{"palyra", "--data-dir", "d", "job", "get", "--json", "ID"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v", got)
	}
	got = interspersed(app, []string{"palyra", "node", "join", "--code", "C", "--data-dir", "D", "--peer", "P"})
	want = []string{"palyra", "--data-dir", "D", "node", "join", "--code", "C", "--peer", "P"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("global flag after subcommand: got %v", got)
	}
	got = interspersed(app, []string{"palyra", "job", "list", "--phase", "queued", "--", "--json"})
	want = []string{"palyra", "job", "list", "--phase", "queued", "--", "--json"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v", got)
	}
	// A command's own flag given before the command ("palyra --json
	// status" was an unknown flag, while --stale worked there); one no
	// command defines stays where it was, to be named as unknown.
	for args, want := range map[string]string{
		"palyra --json status":                          "palyra status --json",
		"palyra --data-dir d --json job list --limit 1": "palyra --data-dir d job list --json --limit 1",
		"palyra --bogus status":                         "palyra --bogus status",
		"palyra job -v list":                            "palyra -v job list", // the app's --version, as before
	} {
		if got := strings.Join(interspersed(app, strings.Fields(args)), " "); got != want {
			t.Errorf("%s: got %q, want %q", args, got, want)
		}
	}
	// Help flags are every level's: 'palyra hook --help' lists the
	// group's commands (it was held as an early flag and lost them).
	for _, args := range [][]string{{"hook", "--help"}, {"job", "-h"}, {"hook"}} {
		if r := runCLI(t, args...); r.code != 0 || !strings.Contains(r.stdout, "COMMANDS:") {
			t.Errorf("palyra %v: %+v; want the group's commands", args, r)
		}
	}
	r := runCLI(t, "--json", "status", "--data-dir", t.TempDir(), "--config-dir", t.TempDir())
	if !strings.Contains(r.stderr, `"code": "no_credential"`) {
		t.Errorf("palyra --json status without a credential: %+v; want status's own JSON error, not a usage error", r)
	}
}

// A mistyped command, at the top or under a group, is named with the
// closest command and the usage exit code, flags after it included; a
// group given alone shows its help.
func TestUnknownCommandsAreNamed(t *testing.T) {
	for args, want := range map[string]string{
		"job sumbit --wasm x.wasm": `'sumbit' is not a command of 'palyra job'. Did you mean "submit"?`,
		"nods --stale":             `'nods' is not a command of 'palyra'. Did you mean "nodes"?`,
		"skill trust ad":           `'ad' is not a command of 'palyra skill trust'. Did you mean "add"?`,
		"jbo list":                 `'jbo' is not a command of 'palyra'. Did you mean "job"?`, // two letters swapped (it offered "browser")
	} {
		r := runCLI(t, strings.Fields(args)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("palyra %s: %+v; want %q, exit %d", args, r, want, exitUsage)
		}
	}
	if r := runCLI(t, "job"); r.code != 0 || !strings.Contains(r.stdout, "submit") {
		t.Errorf("palyra job: %+v", r)
	}
}

// `palyra version` names the release, the commit and the toolchain, also
// as JSON; `--version` prints the same line.
func TestVersion(t *testing.T) {
	defer func(c string) { Commit = c }(Commit)
	Commit = "0123456789abcdef0123"
	r := runCLI(t, "version")
	if r.code != 0 || !strings.Contains(r.stdout, Version) || !strings.Contains(r.stdout, "commit 0123456789ab") || !strings.Contains(r.stdout, "go1.") {
		t.Fatalf("palyra version: %+v", r)
	}
	r = runCLI(t, "version", "--json")
	var b buildInfo
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &b) != nil || b.Version != Version || b.Commit != Commit || b.GoVersion == "" {
		t.Fatalf("palyra version --json: %+v", r)
	}
}

// `palyra completion SHELL` prints a script for bash, zsh and fish that
// completes from palyra itself, and refuses other shells.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "complete -o default -F _palyra palyra",
		"zsh":  "bashcompinit",
		"fish": "complete -c palyra",
	} {
		if r := runCLI(t, "completion", shell); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s: %+v; want %q in it", shell, r, want)
		}
	}
	if r := runCLI(t, "completion", "tcsh"); r.code == 0 || !strings.Contains(r.stderr, "bash, zsh or fish") {
		t.Errorf("completion tcsh: %+v", r)
	}
}

// A joiner whose --peer does not answer is told to check that node (never
// to start one), and a --peer without a port gets the default port, said.
func TestJoinDeadPeerHints(t *testing.T) {
	c := startNode(t)
	r := c.cli("pair", "create", "--kind", "node")
	code := regexp.MustCompile(`P1-[A-Z0-9-]+`).FindString(r.stdout + r.stderr)
	if r.code != 0 || code == "" {
		t.Fatalf("pair create: %+v", r)
	}
	r = runCLI(t, "--data-dir", t.TempDir(), "node", "join", "--code", code, "--peer", "127.0.0.1:1", "--listen", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "--peer takes the HOST:PORT") || strings.Contains(r.stderr, "node start") {
		t.Fatalf("join to a dead peer: %+v", r)
	}
	r = runCLI(t, "--data-dir", t.TempDir(), "node", "join", "--code", code, "--peer", "127.0.0.1", "--listen", "127.0.0.1:0")
	if !strings.Contains(r.stderr, "has no port; using 127.0.0.1:7444") {
		t.Fatalf("join with a bare host: %+v", r)
	}
}

// A joiner that cannot listen on its --listen address is told so before
// its code is spent: the code stays unused and nothing is registered.
func TestJoinOnABusyPortKeepsTheCode(t *testing.T) {
	c := startNode(t)
	r := c.cli("pair", "create", "--kind", "node")
	code := regexp.MustCompile(`P1-[A-Z0-9-]+`).FindString(r.stdout + r.stderr)
	if r.code != 0 || code == "" {
		t.Fatalf("pair create: %+v", r)
	}
	devices := func() int {
		var d struct{ Devices []struct{ ID string } }
		r := c.cli("device", "list", "--json")
		if err := json.Unmarshal([]byte(r.stdout), &d); r.code != 0 || err != nil {
			t.Fatalf("device list: %+v (%v)", r, err)
		}
		return len(d.Devices)
	}
	devicesBefore := devices()
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	r = runCLI(t, "--data-dir", dir, "node", "join", "--code", code, "--peer", c.node.Addr(), "--listen", busy.LocalAddr().String())
	if r.code == 0 || !strings.Contains(r.stderr, "cannot listen on "+busy.LocalAddr().String()) || !strings.Contains(r.stderr, "the code was not used") {
		t.Fatalf("join on a busy port: %+v", r)
	}
	if r := c.cli("pair", "list", "--json"); r.code != 0 || strings.Contains(r.stdout, `"state": "used"`) || !strings.Contains(r.stdout, `"state": "pending"`) {
		t.Fatalf("the code was spent: %+v", r)
	}
	if n := devices(); n != devicesBefore {
		t.Fatalf("a device was registered: %d devices, %d before", n, devicesBefore)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the data dir was written: %v", entries)
	}
}

// doctor on a node's machine checks the data dir, disk, certificates,
// reachability and what the cluster can run (no Chromium here: a warning
// naming what to install).
func TestDoctor(t *testing.T) {
	c := startNode(t)
	r := c.cli("doctor", "--json")
	if r.code != 0 {
		t.Fatalf("doctor: %+v", r)
	}
	var out struct {
		Checks []struct{ Name, Status, Detail, Fix string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ch := range out.Checks {
		got[ch.Name] = ch.Status
		if ch.Name == "cluster capacity" && !strings.Contains(ch.Fix, "apt-get install") {
			t.Errorf("capacity check without an install hint: %+v", ch)
		}
	}
	for name, want := range map[string]string{"this machine's node": "ok", "disk": "ok", "node reachable": "ok", "node certificate": "ok", "cluster capacity": "warn", "raft replication": "ok"} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q (all: %v)", name, got[name], want, got)
		}
	}
	if r := c.cli("doctor", "--strict"); r.code != 1 || !strings.Contains(r.stdout, "no node runs browser jobs") {
		t.Fatalf("doctor --strict with warnings: %+v", r)
	}
	// This data dir's node stopped: doctor says so (another node of a
	// cluster answering 'node reachable' said nothing about this one).
	c.node.Close()
	r = c.cli("doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL  this machine's node") || !strings.Contains(r.stdout, "is not running") ||
		!strings.Contains(r.stdout, "palyra node start --data-dir "+c.dir) {
		t.Fatalf("doctor with this machine's node stopped: %+v", r)
	}
}

// 'job logs -f' prints a job's stdout and stderr as they come and ends
// with the job; 'job logs' on an ended job prints its final output.
func TestJobLogsFollow(t *testing.T) {
	c := startNode(t)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "ticker"), "--input", "3 100ms")
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	r = c.cli("job", "logs", "-f", id)
	if r.code != 0 || r.stdout != "tick 1\ntick 2\ntick 3\n" || r.stderr != "tock 1\ntock 2\ntock 3\n" {
		t.Fatalf("logs -f: %+v", r)
	}
	if r := c.cli("job", "logs", id); r.code != 0 || r.stdout != "tick 1\ntick 2\ntick 3\n" {
		t.Fatalf("logs of an ended job: %+v", r)
	}
	if r := c.cli("job", "logs", "j-0000000000000000"); r.code != 1 || !strings.Contains(r.stderr, "j-0000000000000000") {
		t.Fatalf("logs of an unknown job: %+v", r)
	}
	// 'job logs' of a job still running prints its output so far and says
	// the job goes on (it printed a partial output as if it were all).
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "ticker"), "--input", "600 100ms", "--timeout", "2m")
	long := strings.TrimSpace(r.stdout)
	waitFor(t, "the long ticker to print", func() bool { return strings.Contains(c.cli("job", "logs", long).stdout, "tick 1") })
	if r := c.cli("job", "logs", long); r.code != 0 || !strings.Contains(r.stderr, "note: job "+long+" is still running") || strings.Contains(r.stdout, "note:") {
		t.Fatalf("logs of a running job: %+v; want its output so far and a note on stderr", r)
	}
	c.cli("job", "cancel", long)
}

// --browser-schema prints the script schema as JSON.
func TestBrowserSchemaFlag(t *testing.T) {
	r := runCLI(t, "job", "submit", "--browser-schema")
	var doc map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &doc) != nil || doc["title"] != "Palyra browser script" {
		t.Fatalf("--browser-schema: %+v", r)
	}
	if got := navigateHosts([]byte(`{"steps":[{"action":"navigate","url":"https://a.example/x"},{"action":"click","selector":"a"},{"action":"navigate","url":"http://b.example:8080/"},{"action":"navigate","url":"https://a.example/y"}]}`)); !slices.Equal(got, []string{"a.example", "b.example"}) {
		t.Fatalf("navigate hosts: %v", got)
	}
}

// 'palyra metrics' prints the node's Prometheus text through the API;
// --match and --json narrow and parse it.
func TestMetricsCommand(t *testing.T) {
	c := startNode(t)
	r := c.cli("metrics")
	if r.code != 0 || !strings.Contains(r.stdout, "# TYPE palyra_raft_leader gauge") || !strings.Contains(r.stdout, "palyra_certificate_expiry_seconds") {
		t.Fatalf("metrics: code %d, %.300s / %s", r.code, r.stdout, r.stderr)
	}
	r = c.cli("metrics", "--match", "palyra_raft_leader", "--json")
	var out struct {
		Series []struct {
			Name  string
			Value float64
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Series) == 0 || out.Series[0].Name != "palyra_raft_leader" || out.Series[0].Value != 1 {
		t.Fatalf("metrics --json: %+v %v", r, err)
	}
	for _, s := range out.Series {
		if !strings.Contains(s.Name, "palyra_raft_leader") {
			t.Fatalf("--match let %s through", s.Name)
		}
	}
}

// Help text: every description's lines start where the template puts
// them (they came out three spaces further in than the first line).
func TestHelpDescriptionsAreNotDoubleIndented(t *testing.T) {
	handIndented := regexp.MustCompile(`\n   [^ ]`) // every line three in: the template's indent, again
	var walk func(path string, cmds []*ucli.Command)
	walk = func(path string, cmds []*ucli.Command) {
		for _, c := range cmds {
			if handIndented.MatchString(c.Description) {
				t.Errorf("%s %s: description lines indented by hand", path, c.Name)
			}
			walk(path+" "+c.Name, c.Subcommands)
		}
	}
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	if handIndented.MatchString(app.Description) {
		t.Error("the app's description lines are indented by hand")
	}
	walk("palyra", app.Commands)
	r := runCLI(t, "hook", "bind", "--help")
	if !strings.Contains(r.stdout, "\n   skill:disabled") && !strings.Contains(r.stdout, "\n   and active") {
		t.Fatalf("hook bind --help: %q", r.stdout)
	}
}
