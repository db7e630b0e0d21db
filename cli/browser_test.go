package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/runtime/browser"
)

// loginSite is a tiny site with a login form.
func loginSite(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><body><h1>Sign in</h1><form method="POST" action="/login">
<input id="user" name="user"><input id="pass" name="pass" type="password"><button id="go" type="submit">Go</button></form></body></html>`)
	})
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("pass") != "hunter2" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		fmt.Fprintf(w, `<html><body><div id="welcome">Welcome, %s!</div></body></html>`, r.FormValue("user"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestBrowserJobThroughCLI(t *testing.T) {
	if _, ok := browser.Detect(); !ok {
		if testing.Short() {
			t.Skip("no Chromium; " + browser.InstallHint)
		}
		t.Fatal("no Chromium: " + browser.InstallHint + " (make deps installs it)")
	}
	dir := t.TempDir()
	n, err := node.Start(context.Background(), node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 1, BrowserSlots: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := &cluster{t: t, node: n, dir: dir}
	site := loginSite(t)

	script := fmt.Sprintf(`{"steps":[
 {"action":"navigate","url":"%s/"},
 {"action":"type","selector":"#user","text":"ada"},
 {"action":"type","selector":"#pass","text":"hunter2"},
 {"action":"click","selector":"#go"},
 {"action":"wait_for","selector":"#welcome"},
 {"action":"extract","selector":"#welcome","name":"greeting"},
 {"action":"screenshot","name":"page.png"}]}`, site.URL)
	file := filepath.Join(t.TempDir(), "login.json")
	os.WriteFile(file, []byte(script), 0o600)

	r := c.cli("job", "submit", "--browser", file, "--allow-host", "127.0.0.1", "--allow-private", "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("browser job: %+v", r)
	}
	var j jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	var vals map[string]string
	if err := json.Unmarshal([]byte(j.Output), &vals); err != nil || vals["greeting"] != "Welcome, ada!" {
		t.Fatalf("extracted %q (%v)", j.Output, err)
	}
	if len(j.Artifacts) != 1 || j.Artifacts[0].MediaType != "image/png" {
		t.Fatalf("artifacts %+v", j.Artifacts)
	}
	out := filepath.Join(t.TempDir(), "shot.png")
	if r := c.cli("job", "artifact", j.ID, "page.png", "-o", out); r.code != 0 {
		t.Fatalf("artifact: %+v", r)
	}
	data, _ := os.ReadFile(out)
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil || img.Bounds().Dx() < 100 || img.Bounds().Dy() < 100 {
		t.Fatalf("screenshot is not a page-sized PNG: %v", err)
	}
	if r := c.cli("job", "get", j.ID); r.code != 0 || !regexp.MustCompile(`(?m)^kind +browser$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^artifacts +page\.png \(image/png, [0-9]+ bytes; palyra job artifact `+j.ID+` page\.png -o FILE\)$`).MatchString(r.stdout) {
		t.Fatalf("job get: %+v, want its kind and its artifacts", r)
	}
	if r := c.cli("job", "list"); r.code != 0 || !regexp.MustCompile(`(?m)^`+j.ID+` +browser +completed`).MatchString(r.stdout) {
		t.Fatalf("job list: %+v, want the job with its kind", r)
	}
	// --json describes the file written, as every command that prints
	// takes --json ("unknown flag" before).
	var art struct {
		Path  string `json:"path"`
		Bytes int    `json:"bytes"`
	}
	if r := c.cli("job", "artifact", j.ID, "page.png", "-o", out, "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &art) != nil || art.Path != out || art.Bytes != len(data) {
		t.Fatalf("artifact --json: %+v → %+v", r, art)
	}
	// -o - is stdout, byte for byte (a file named "-" was written).
	if r := c.cli("job", "artifact", j.ID, "page.png", "-o", "-"); r.code != 0 || r.stdout != string(data) || !strings.Contains(r.stderr, "wrote stdout") {
		t.Fatalf("artifact -o -: exit %d, %d bytes on stdout (want %d), stderr %q", r.code, len(r.stdout), len(data), r.stderr)
	}
	if r := c.cli("job", "browse", site.URL+"/", "--screenshot", "-"); r.code != exitUsage || !strings.Contains(r.stderr, "palyra job artifact JOB_ID page.png -o -") {
		t.Fatalf("browse --screenshot -: %+v", r)
	}
	if r := c.cli("job", "artifact", j.ID, "nope.png"); r.code != 1 || !strings.Contains(r.stderr, "its artifacts are: page.png") {
		t.Fatalf("unknown artifact: %+v", r)
	}

	// The browse shortcut.
	shot := filepath.Join(t.TempDir(), "b.png")
	r = c.cli("job", "browse", site.URL+"/", "--text", "h1", "--screenshot", shot, "--allow-private")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Sign in" {
		t.Fatalf("browse: %+v", r)
	}
	if _, err := os.Stat(shot); err != nil {
		t.Fatal(err)
	}

	// A bad script says what is wrong, once.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"steps":[{"action":"fly"}]}`), 0o600)
	r = c.cli("job", "submit", "--browser", bad)
	if r.code == 0 || !strings.Contains(r.stderr, "invalid browser script: steps[0]") || strings.Count(r.stderr, "invalid browser script") != 1 {
		t.Fatalf("bad script: %+v, want one 'invalid browser script: steps[0]…'", r)
	}

	// Wasm-only flags are refused with a browser script (they were taken
	// and ignored).
	for _, f := range [][]string{{"--input", "x"}, {"--memory", "32MiB"}, {"--fuel", "1000"}, {"--kv-prefix", "a/"}} {
		r = c.cli(append([]string{"job", "submit", "--browser", bad}, f...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, f[0]+" applies to wasm jobs only") {
			t.Fatalf("job submit --browser %v: %+v, want it refused", f, r)
		}
	}

	// A plain device may not grant itself network access (policy).
	cfg := filepath.Join(t.TempDir(), "dev")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", n.Addr()); r.code != 0 {
		t.Fatalf("pair: %+v", r)
	}
	r = device(t, cfg, "job", "submit", "--browser", file, "--allow-host", "127.0.0.1", "--allow-private")
	if r.code != 1 || !strings.Contains(r.stderr, "grant.http") {
		t.Fatalf("grant without policy: %+v", r)
	}
}

// With no Chromium on any node, 'job browse' ends within seconds saying
// why and what to install, and withdraws its job; 'job submit --wait'
// ends the same way but leaves the job queued; once Chromium appears the
// running node finds it, without a restart, and browsing works.
func TestBrowseWithoutChromiumFailsFastThenRedetects(t *testing.T) {
	chromium, ok := browser.Detect()
	if !ok {
		if testing.Short() {
			t.Skip("no Chromium; " + browser.InstallHint)
		}
		t.Fatal("no Chromium: " + browser.InstallHint + " (make deps installs it)")
	}
	var installed atomic.Bool
	dir := t.TempDir()
	n, err := node.Start(context.Background(), node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 1, BrowserSlots: 1,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		DetectBrowser: func() (string, bool) { return chromium, installed.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := &cluster{t: t, node: n, dir: dir}
	site := loginSite(t)

	begin := time.Now()
	r := c.cli("job", "browse", site.URL+"/", "--text", "h1", "--allow-private")
	if r.code != 1 || !strings.Contains(r.stderr, "no node in the cluster can run this browser job") || !strings.Contains(r.stderr, "apt-get install") {
		t.Fatalf("browse with no Chromium: %+v", r)
	}

	t.Logf("browse gave up after %s: %s", time.Since(begin).Round(time.Millisecond), strings.TrimSpace(r.stderr))
	list := c.cli("job", "list", "--json")
	if !strings.Contains(list.stdout, `"aborted"`) || strings.Contains(list.stdout, `"queued"`) {
		t.Fatalf("the browse job should be aborted, not left queued: %+v", list)
	}

	script := filepath.Join(t.TempDir(), "s.json")
	os.WriteFile(script, fmt.Appendf(nil, `{"steps":[{"action":"navigate","url":"%s/"}]}`, site.URL), 0o600)
	r = c.cli("job", "submit", "--browser", script, "--allow-host", "127.0.0.1", "--allow-private", "--wait")
	if r.code != 1 || !strings.Contains(r.stderr, "no eligible node offers browser capacity") || !strings.Contains(r.stderr, "palyra job cancel") {
		t.Fatalf("submit --wait with no Chromium: %+v", r)
	}
	// A constraint no node matches is the job's own doing: no "install
	// Chromium" (it was said whatever the reason).
	r = c.cli("job", "submit", "--browser", script, "--allow-host", "127.0.0.1", "--allow-private", "--constraint", "zone=nowhere", "--wait")
	if r.code != 1 || !strings.Contains(r.stderr, "matching zone=nowhere") || strings.Contains(r.stderr, "apt-get install") {
		t.Fatalf("submit --wait with a constraint no node matches: %+v", r)
	}
	if m := regexp.MustCompile(`palyra job cancel (j-[0-9a-f]+)`).FindStringSubmatch(r.stderr); m == nil {
		t.Fatalf("no job to cancel in %q", r.stderr)
	} else if rc := c.cli("job", "cancel", m[1]); rc.code != 0 { // it could never run
		t.Fatalf("cancel: %+v", rc)
	}
	r = c.cli("job", "submit", "--browser", script, "--allow-host", "127.0.0.1", "--allow-private", "--wait", "--wait-timeout", "1500ms")
	if r.code != 1 || !strings.Contains(r.stderr, "gave up waiting after 1.5s") {
		t.Fatalf("submit --wait-timeout: %+v", r)
	}

	// Chromium "installed": the node notices, the queued jobs run, and
	// browse works.
	installed.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := c.cli("job", "list", "--json")
		if !strings.Contains(l.stdout, `"queued"`) && !strings.Contains(l.stdout, `"running"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queued browser jobs never ran after Chromium appeared: %s", l.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r = c.cli("job", "browse", site.URL+"/", "--text", "h1", "--allow-private")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Sign in" {
		t.Fatalf("browse after Chromium appeared: %+v", r)
	}
}

// The browser session commands, end to end on one node: open, do (steps
// as words, refs from observe), screenshot, list, close.
func TestBrowserSessionCommands(t *testing.T) {
	if _, ok := browser.Detect(); !ok {
		if testing.Short() {
			t.Skip("no Chromium; " + browser.InstallHint)
		}
		t.Fatal("no Chromium: " + browser.InstallHint + " (make deps installs it)")
	}
	dir := t.TempDir()
	n, err := node.Start(context.Background(), node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 1, BrowserSlots: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := &cluster{t: t, node: n, dir: dir}
	site := loginSite(t)
	var id string
	waitForCLI(t, func() bool {
		r := c.cli("browser", "open", "--allow-host", "127.0.0.1", "--allow-private")
		id = strings.TrimSpace(r.stdout)
		return r.code == 0
	})
	r := c.cli("browser", "do", id, "navigate "+site.URL+"/", "observe")
	if r.code != 0 || !strings.Contains(r.stdout, `button "Go"`) {
		t.Fatalf("do navigate+observe: %+v", r)
	}
	user := regexp.MustCompile(`(?m)^(e[0-9]+) input\[text\]`).FindStringSubmatch(r.stdout)
	pass := regexp.MustCompile(`(?m)^(e[0-9]+) input\[password\]`).FindStringSubmatch(r.stdout)
	if user == nil || pass == nil {
		t.Fatalf("no input refs in:\n%s", r.stdout)
	}
	out := filepath.Join(t.TempDir(), "not", "yet") // made by the command
	r = c.cli("browser", "do", id, "type "+user[1]+" ada", "type "+pass[1]+" hunter2", "click #go", "wait_for #welcome", "extract #welcome greeting", "screenshot after.png", "--output-dir", out)
	if r.code != 0 || !strings.Contains(r.stdout, `"greeting": "Welcome, ada!"`) {
		t.Fatalf("do login: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(out, "after.png")); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(out, "s.png")
	if r := c.cli("browser", "screenshot", id, "-o", shot, "--json"); r.code != 0 || !strings.Contains(r.stdout, `"media_type": "image/png"`) {
		t.Fatalf("screenshot: %+v", r)
	}
	if b, err := os.ReadFile(shot); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("%s: %v, want a PNG", shot, err)
	}
	if r := c.cli("browser", "screenshot", id, "-o", "-"); r.code != 0 || !strings.HasPrefix(r.stdout, "\x89PNG") || !strings.Contains(r.stderr, "wrote stdout") {
		t.Fatalf("screenshot -o -: exit %d, stdout starts %q, stderr %q", r.code, r.stdout[:min(len(r.stdout), 8)], r.stderr)
	}
	if r := c.cli("browser", "screenshot", id, "-o", "-", "--json"); r.code != exitUsage {
		t.Fatalf("screenshot -o - --json: %+v", r)
	}
	// A page whose PNG is over the session limit comes back as JPEG, and
	// the file says so by its name.
	noise := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<body style="margin:0"><canvas id=c width=1280 height=800></canvas><script>
const c = document.getElementById('c').getContext('2d'), d = c.createImageData(1280, 800);
for (let i = 0; i < d.data.length; i++) d.data[i] = i % 4 == 3 ? 255 : 120 + Math.random() * 16 | 0;
c.putImageData(d, 0, 0);</script>`)
	}))
	defer noise.Close()
	if r := c.cli("browser", "do", id, "navigate "+noise.URL+"/"); r.code != 0 {
		t.Fatalf("navigate to the noise page: %+v", r)
	}
	r = c.cli("browser", "screenshot", id, "-o", filepath.Join(out, "noise.png"))
	if r.code != 0 || !strings.Contains(r.stderr, "noise.jpg (image/jpeg") || !strings.Contains(r.stderr, "a JPEG") {
		t.Fatalf("screenshot of a noisy page: %+v, want it written as noise.jpg, saying why", r)
	}
	if b, err := os.ReadFile(filepath.Join(out, "noise.jpg")); err != nil || !bytes.HasPrefix(b, []byte{0xff, 0xd8}) {
		t.Fatalf("noise.jpg: %v, want a JPEG", err)
	}
	// A long noisy page: the JPEG is of the viewport, as the PNG was (it
	// was of the whole page, over the limit even as a JPEG).
	long := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<body style="margin:0"><canvas id=c width=1280 height=6000></canvas><script>
const c = document.getElementById('c').getContext('2d'), d = c.createImageData(1280, 6000);
for (let i = 0; i < d.data.length; i++) d.data[i] = i % 4 == 3 ? 255 : 120 + Math.random() * 16 | 0;
c.putImageData(d, 0, 0);</script>`)
	}))
	defer long.Close()
	if r := c.cli("browser", "do", id, "navigate "+long.URL+"/"); r.code != 0 {
		t.Fatalf("navigate to the long page: %+v", r)
	}
	if r := c.cli("browser", "screenshot", id, "-o", filepath.Join(out, "long.png")); r.code != 0 || !strings.Contains(r.stderr, "long.jpg") {
		t.Fatalf("screenshot of a long noisy page: %+v", r)
	}
	if f, err := os.Open(filepath.Join(out, "long.jpg")); err != nil {
		t.Fatal(err)
	} else {
		cfg, err := jpeg.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Height >= 6000 || cfg.Height < 100 {
			t.Fatalf("long.jpg: %+v %v, want the viewport, not the 6000-pixel page", cfg, err)
		}
	}
	// A page's dialog is answered, and the call's notes say so.
	dialog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<script>confirm('really?')</script><p id=after>after</p>`)
	}))
	defer dialog.Close()
	r = c.cli("browser", "do", id, "navigate "+dialog.URL+"/", "extract #after after", "observe")
	if r.code != 0 || !strings.Contains(r.stdout, `"after": "after"`) || !strings.Contains(r.stderr, "note: dialog: confirm") ||
		strings.Count(r.stdout+r.stderr, "really?") != 1 {
		t.Fatalf("a page with a dialog: %+v, want its note once, on stderr (not in observe too)", r)
	}
	if r := c.cli("browser", "list"); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Fatalf("list: %+v", r)
	}
	if r := c.cli("browser", "do", id, "fly away"); r.code != 2 || !strings.Contains(r.stderr, "unknown step") {
		t.Fatalf("bad step: %+v", r)
	}
	if r := c.cli("browser", "close", id); r.code != 0 {
		t.Fatalf("close: %+v", r)
	}
	if r := c.cli("browser", "do", id, "observe"); r.code != 1 || !strings.Contains(r.stderr, "browser session "+id+" is already closed") {
		t.Fatalf("do on a closed session: %+v", r)
	}
	// Closing it again fails as cancelling an ended job does (exit 1),
	// saying the session is already closed.
	again := c.cli("browser", "close", id)
	if again.code != 1 || !strings.Contains(again.stderr, "browser session "+id+" is already closed") {
		t.Fatalf("close of a closed session: %+v, want exit 1 saying it is already closed", again)
	}
	b := c.cli("job", "browse", site.URL+"/", "--allow-private", "--json")
	var done jobJSON
	if err := json.Unmarshal([]byte(b.stdout), &done); err != nil || b.code != 0 {
		t.Fatalf("browse: %+v (%v)", b, err)
	}
	if r := c.cli("job", "cancel", done.ID); r.code != again.code || !strings.Contains(r.stderr, "already completed") {
		t.Fatalf("job cancel of a completed job: %+v; browser close of a closed session exits %d: they should agree", r, again.code)
	}
}

func waitForCLI(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// 'browser do' names what a step does not name by the step's place in the
// call, as a browser job names unnamed artifacts: two evaluates both wrote
// "value", two screenshots both step0.png (the second file replaced the
// first in --output-dir). A wait_text step is named so in errors.
func TestBrowserDoStepNames(t *testing.T) {
	var names []any
	for i, arg := range []string{"evaluate 1", "evaluate 2", "extract #a", "extract #b b", "screenshot", "screenshot", "pdf", "screenshot x.png"} {
		m, err := parseStep(i, arg)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, m["name"])
	}
	if got := fmt.Sprint(names); got != "[step0 step1 step2 b step4.png step5.png step6.pdf x.png]" {
		t.Fatalf("names %s", got)
	}
	msg := "steps[1] (wait_for): gave up waiting for the page text to contain \"x\": step timeout of 5s (set by the session's default) ran out"
	if got := relabelWaitText(msg, []int{1}); !strings.HasPrefix(got, "steps[1] (wait_text): gave up") {
		t.Fatalf("relabelled: %s", got)
	}
	if got := relabelWaitText(msg, []int{0, 11}); got != msg {
		t.Fatalf("relabelled another step's error: %s", got)
	}
}

// startBrowserNode starts a one-node cluster with a browser slot, and
// fails the test when there is no Chromium (skips it under -short).
func startBrowserNode(t *testing.T) *cluster {
	t.Helper()
	if _, ok := browser.Detect(); !ok {
		if testing.Short() {
			t.Skip("no Chromium; " + browser.InstallHint)
		}
		t.Fatal("no Chromium: " + browser.InstallHint + " (make deps installs it)")
	}
	dir := t.TempDir()
	n, err := node.Start(context.Background(), node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 1, BrowserSlots: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return &cluster{t: t, node: n, dir: dir}
}

// A browser job that fails prints no empty values block ("{}") before its
// error, on --wait or on 'job get'; values its steps set before the
// failure are printed labelled as partial, on stderr (--wait) or under a
// heading of their own (job get); --json stays one object; the exit code
// of a failed job is 1.
func TestFailedBrowserJobPrintsNoEmptyValues(t *testing.T) {
	c := startBrowserNode(t)
	site := loginSite(t)
	script := func(steps string) string {
		f := filepath.Join(t.TempDir(), "s.json")
		os.WriteFile(f, fmt.Appendf(nil, `{"steps":[{"action":"navigate","url":"%s/"},%s
 {"action":"wait_for","selector":"#never","timeout_ms":300}]}`, site.URL, steps), 0o600)
		return f
	}
	submit := func(file string, json ...string) result {
		return c.cli(append([]string{"job", "submit", "--browser", file, "--allow-host", "127.0.0.1", "--allow-private", "--wait"}, json...)...)
	}
	jobOf := func(r result) jobJSON {
		t.Helper()
		var j jobJSON
		if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.Phase != "failed" {
			t.Fatalf("--wait --json of a failed job: %v, want one JSON object of a failed job: %+v", err, r)
		}
		return j
	}

	none := script("")
	r := submit(none)
	if r.code != 1 || strings.Contains(r.stdout, "{}") || strings.Contains(r.stderr, "{}") || !strings.Contains(r.stderr, "steps[1] (wait_for)") {
		t.Fatalf("a failed job with no values, --wait: %+v, want its error and no {}", r)
	}
	r = submit(none, "--json")
	if r.code != 1 {
		t.Fatalf("--wait --json: %+v", r)
	}
	j := jobOf(r)
	if g := c.cli("job", "get", j.ID); g.code != 0 || strings.Contains(g.stdout, "{}") || strings.Contains(g.stdout, "--- output") ||
		!strings.Contains(g.stdout, "steps[1] (wait_for)") {
		t.Fatalf("job get of a failed job with no values: %+v, want no output block", g)
	}

	partial := script(`{"action":"extract","selector":"h1","name":"title"},`)
	r = submit(partial)
	if r.code != 1 || r.stdout != "" || !regexp.MustCompile(`(?m)^partial values.*\n\{"title":"Sign in"\}$`).MatchString(r.stderr) {
		t.Fatalf("a failed job with values set before the failure, --wait: %+v, want them on stderr labelled partial", r)
	}
	j = jobOf(submit(partial, "--json"))
	if g := c.cli("job", "get", j.ID); g.code != 0 || strings.Contains(g.stdout, "--- output") ||
		!regexp.MustCompile(`(?m)^--- partial values.*\n\{"title":"Sign in"\}$`).MatchString(g.stdout) {
		t.Fatalf("job get of a failed job with partial values: %+v, want them under a heading saying so", g)
	}

	// browse: nothing on stdout but its error; with --json, the job.
	r = c.cli("job", "browse", site.URL+"/", "--text", "#never", "--timeout", "1s", "--allow-private")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "job timed out") {
		t.Fatalf("browse of a job that fails: %+v", r)
	}
	r = c.cli("job", "browse", site.URL+"/", "--text", "#never", "--timeout", "1s", "--allow-private", "--json")
	var b jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &b); r.code != 1 || err != nil || b.Phase != "failed" {
		t.Fatalf("browse --json of a job that fails: %+v (%v), want the job as one JSON object", r, err)
	}
}

// 'job browse' of a page that answers an HTTP error status decides as
// curl does: exit 0 by default, with a note on stderr naming the status
// (it exited 0 silently); --fail makes it an error, exit 1, printing no
// values. A page that answers 200 gets no note, --fail or not.
func TestBrowseHTTPErrorStatus(t *testing.T) {
	c := startBrowserNode(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path != "/" {
			w.WriteHeader(http.StatusNotFound)
		}
		fmt.Fprintf(w, `<h1>%s</h1>`, r.URL.Path)
	}))
	t.Cleanup(site.Close)
	const note = "the page answered 404 Not Found"

	r := c.cli("job", "browse", site.URL+"/missing", "--text", "h1", "--allow-private")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "/missing" || !strings.Contains(r.stderr, note) {
		t.Fatalf("browse of a 404 page: %+v, want its text, exit 0 and a note saying %q", r, note)
	}
	r = c.cli("job", "browse", site.URL+"/missing", "--text", "h1", "--allow-private", "--fail")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, note) {
		t.Fatalf("browse --fail of a 404 page: %+v, want exit 1 saying %q and nothing on stdout", r, note)
	}
	r = c.cli("job", "browse", site.URL+"/missing", "--allow-private", "--fail", "--json")
	var j jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); r.code != 1 || err != nil || !strings.Contains(r.stderr, note) {
		t.Fatalf("browse --fail --json of a 404 page: %+v (%v), want exit 1, the job as one JSON object", r, err)
	}
	r = c.cli("job", "browse", site.URL+"/", "--text", "h1", "--allow-private", "--fail")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "/" || strings.Contains(r.stderr, "answered") {
		t.Fatalf("browse --fail of a page that answers 200: %+v", r)
	}
}

// 'job browse' says what the worker noted on a page that loaded (a
// sub-request to a host not granted, blocked: only a failed or --json
// browse showed it), as a line a person reads; --step-timeout bounds
// each step, and a --text element that never appears is named as such.
func TestBrowseNotesAndStepTimeout(t *testing.T) {
	c := startBrowserNode(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<h1>Hi</h1><img src="http://127.0.0.2:9/x.png">`)
	}))
	t.Cleanup(site.Close)
	r := c.cli("job", "browse", site.URL+"/", "--text", "h1", "--allow-private")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "Hi" || !strings.Contains(r.stderr, `note: blocked image http://127.0.0.2:9/x.png: host "127.0.0.2" is not in the job's --allow-host list`) {
		t.Fatalf("browse of a page with a blocked image: %+v; want its text and a note naming the blocked request", r)
	}
	r = c.cli("job", "browse", site.URL+"/", "--text", "h2", "--step-timeout", "700ms", "--allow-private")
	if r.code != 1 || !strings.Contains(r.stderr, "step timeout of 700ms") || !strings.Contains(r.stderr, `no element matched --text "h2" in time`) {
		t.Fatalf("browse --text of an element never there, --step-timeout 700ms: %+v; want the step's limit and the hint", r)
	}
	if r := c.cli("job", "browse", site.URL+"/", "--step-timeout", "2m"); r.code != exitUsage || !strings.Contains(r.stderr, "longer than the job's --timeout") {
		t.Fatalf("--step-timeout over --timeout: %+v; want a usage error", r)
	}
}

// 'browser do' takes text and expressions as written: they were split
// into words and joined by one space ("a  b" was typed "a b", a "//"
// comment swallowed the lines after it). A target with spaces goes in
// quotes; a step given more words than it takes is refused.
func TestBrowserDoStepsKeepTheirText(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want map[string]any
	}{
		{"type #user a  b   c", map[string]any{"action": "type", "selector": "#user", "text": "a  b   c"}},
		{"evaluate 'a  b'.length", map[string]any{"action": "evaluate", "expression": "'a  b'.length", "name": "step0"}},
		{"evaluate 1 // comment\n+ 41", map[string]any{"action": "evaluate", "expression": "1 // comment\n+ 41", "name": "step0"}},
		{"type 'form #user' ada", map[string]any{"action": "type", "selector": "form #user", "text": "ada"}},
		{"extract \"main h1\" title", map[string]any{"action": "extract", "selector": "main h1", "name": "title"}},
		{"click main  button", map[string]any{"action": "click", "selector": "main  button"}},
		{"wait_text Hello  world", map[string]any{"action": "wait_for", "text": "Hello  world"}},
		{"extract e12", map[string]any{"action": "extract", "ref": "e12", "name": "step0"}},
	} {
		m, err := parseStep(0, c.arg)
		if err != nil || fmt.Sprint(m) != fmt.Sprint(c.want) {
			t.Errorf("%q: %v %v, want %v", c.arg, m, err, c.want)
		}
	}
	for _, arg := range []string{"navigate http://a/ http://b/", "press Enter Tab", "extract main h1 title", "type 'unclosed x", "screenshot a.png b.png"} {
		if m, err := parseStep(0, arg); err == nil {
			t.Errorf("%q: %v, want refused", arg, m)
		}
	}
}

// job browse refuses output files it could not write, or would write
// wrong, before the job runs: a missing directory failed after the run
// with no job id, one file for both lost the PNG, x.jpg got PNG bytes.
func TestBrowseOutputsCheckedBeforeTheJob(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ shot, pdf, want string }{
		{filepath.Join(dir, "nope", "x.png"), "", "does not exist"},
		{filepath.Join(dir, "same.png"), filepath.Join(dir, "same.png"), "both name"},
		{filepath.Join(dir, "x.jpg"), "", "name it ….png"},
		{"", filepath.Join(dir, "x.png"), "name it ….pdf"},
		{dir, "", "is a directory"},
	} {
		if err := checkBrowseOutputs(c.shot, c.pdf); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--screenshot %q --pdf %q: %v, want %q", c.shot, c.pdf, err, c.want)
		}
	}
	if err := checkBrowseOutputs(filepath.Join(dir, "page.png"), filepath.Join(dir, "page.pdf")); err != nil {
		t.Errorf("good outputs refused: %v", err)
	}
	if err := checkBrowseOutputs("shot", ""); err != nil { // no extension: as given
		t.Errorf("a file without an extension refused: %v", err)
	}
}
