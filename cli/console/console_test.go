package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/cli/console"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/runtime/browser"
)

// threeNodes starts a three-node in-process cluster and returns the
// first node's operator client.
func threeNodes(t *testing.T) (*client.Client, []*node.Node) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(dir string) *node.Node {
		n, err := node.Start(context.Background(), node.Config{DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 2, BrowserSlots: -1, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	first := start(t.TempDir())
	cred, err := identity.LoadCredential(first.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(first.Addr(), cred)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	nodes := []*node.Node{first}
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
		ncred, pr, err := client.Pair(ctx, first.Addr(), code, client.PairOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := node.PrepareJoin(dir, ncred, pr.ClusterName, append([]string{first.Addr()}, pr.Peers...), pr.DataKey); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, start(dir))
	}
	return cl, nodes
}

func chromium(t *testing.T) string {
	t.Helper()
	p, ok := browser.Detect()
	if !ok {
		if testing.Short() {
			t.Skip("no Chromium; " + browser.InstallHint)
		}
		t.Fatal("no Chromium: " + browser.InstallHint + " (make deps installs it)")
	}
	return p
}

// serve starts a console for cl on a free loopback port.
func serve(t *testing.T, cl *client.Client) (*console.Server, string) {
	t.Helper()
	ln, err := console.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Run(ctx)
	hs := &http.Server{Handler: srv.Handler(ln.Addr().String())}
	go hs.Serve(ln)
	t.Cleanup(func() { cancel(); hs.Close() })
	return srv, ln.Addr().String()
}

// The console, in headless Chromium, shows the cluster's three nodes and a
// job the test ran, and that job's output on its page; the screenshots are
// kept (PALYRA_ARTIFACTS, default test-artifacts/ at the repository root).
func TestConsoleShowsNodesAndJobsInChromium(t *testing.T) {
	exec := chromium(t)
	cl, nodes := threeNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := cl.Node.ListNodes(ctx, connect.NewRequest(&palyrav1.ListNodesRequest{}))
		alive := 0
		if err == nil {
			for _, n := range l.Msg.Nodes {
				if n.State == "alive" && n.Voter {
					alive++
				}
			}
		}
		if alive == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("three alive voters never formed (%v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	job, err := cl.Run(ctx, &palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, "reverse"), Input: []byte("hello console")}, nil)
	if err != nil || job.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		t.Fatalf("job: %v %v", job, err)
	}
	srv, addr := serve(t, cl)
	// Some load while the console samples, so its charts have a shape.
	load, stopLoad := context.WithTimeout(ctx, 5*time.Second)
	defer stopLoad()
	mod := testwasm.Build(t, "reverse")
	for range 4 {
		go func() {
			for load.Err() == nil {
				cl.Run(load, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("load")}, nil)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}

	alloc, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exec), chromedp.WindowSize(1360, 900), chromedp.NoSandbox)...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(alloc)
	defer bcancel()

	var overview, detail []byte
	var nodesText, jobsText, outText string
	err = chromedp.Do(bctx,
		chromedp.Navigate("http://"+addr+"/?token="+srv.Token()),
		chromedp.WaitVisible(chromedp.CSS("table.nodes")),
	)
	if err == nil {
		_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.querySelectorAll("table.nodes tbody tr").length === 3 && document.querySelector("table.jobs") !== null && document.querySelector("table.jobs").innerText.includes("completed")`, chromedp.WithPollingTimeout(30*time.Second)))
	}
	if err == nil {
		err = chromedp.Do(bctx, chromedp.Sleep(6*time.Second)) // samples for the charts, under load and after
	}
	if err == nil {
		nodesText, err = chromedp.Run(bctx, liveText("table.nodes"))
	}
	if err == nil {
		jobsText, err = chromedp.Run(bctx, liveText("table.jobs"))
	}
	if err == nil {
		overview, err = chromedp.Run(bctx, chromedp.FullScreenshot(100))
	}
	if err == nil {
		err = chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/#/jobs/"+job.Id), chromedp.WaitVisible(chromedp.CSS("pre.out")))
	}
	if err == nil {
		outText, err = chromedp.Run(bctx, liveText("pre.out"))
	}
	if err == nil {
		detail, err = chromedp.Run(bctx, chromedp.FullScreenshot(100))
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if !strings.Contains(nodesText, n.ID()) {
			t.Errorf("the nodes table lacks %s:\n%s", n.ID(), nodesText)
		}
	}
	if !strings.Contains(jobsText, "completed") {
		t.Errorf("the recent jobs table shows no completed job:\n%s", jobsText)
	}
	if strings.TrimSpace(outText) != "elosnoc olleh" {
		t.Errorf("job page stdout %q", outText)
	}
	dir := os.Getenv("PALYRA_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "test-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, img := range map[string][]byte{"console-overview.png": overview, "console-job.png": detail} {
		if err := os.WriteFile(filepath.Join(dir, name), img, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
}

// liveText reads the text of the element matching sel as the page shows it
// now. The console rebuilds its view every second, so a node found by one
// DevTools call may be detached by the next (chromedp.Text then reads ""):
// one evaluation queries and reads in the same turn of the page's event loop.
func liveText(sel string) chromedp.Action[string] {
	return chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel))
}

// The API refuses callers without the session, a foreign Host header and
// cross-origin writes; the token in the URL becomes the session cookie.
func TestConsoleGuardsItsAPI(t *testing.T) {
	cl, _ := oneNode(t)
	srv, addr := serve(t, cl)
	get := func(c *http.Client, host, path string) *http.Response {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	plain := &http.Client{}
	if r := get(plain, "", "/api/overview"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no session: %d", r.StatusCode)
	}
	if r := get(plain, "evil.example:80", "/"); r.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("foreign Host: %d", r.StatusCode)
	}
	if r := get(plain, "", "/?token=wrong"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", r.StatusCode)
	}
	jar, _ := cookiejar.New(nil)
	withJar := &http.Client{Jar: jar}
	if r := get(withJar, "", "/?token="+srv.Token()); r.StatusCode != http.StatusOK {
		t.Fatalf("login: %d", r.StatusCode)
	}
	if r := get(withJar, "", "/api/overview"); r.StatusCode != http.StatusOK {
		t.Fatalf("with the session: %d", r.StatusCode)
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/pairings", strings.NewReader(`{"kind":"device"}`))
	req.Header.Set("Origin", "http://evil.example")
	resp, err := withJar.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin POST: %d", resp.StatusCode)
	}
	if _, err := console.Listen("0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "loopback only") {
		t.Fatalf("non-loopback listen: %v", err)
	}
}

// oneNode is a one-node cluster (the guard test needs no more).
func oneNode(t *testing.T) (*client.Client, *node.Node) {
	t.Helper()
	n, err := node.Start(context.Background(), node.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Fast: true, WasmSlots: 1, BrowserSlots: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cred, err := identity.LoadCredential(n.Layout().OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(n.Addr(), cred)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl, n
}

// The token in the printed URL is good for one sign-in: the session cookie
// it buys holds another value, and the same URL opened again (from
// scrollback or history, by anyone) is refused with a page saying how to
// get a new link.
func TestConsoleTokenIsSingleUse(t *testing.T) {
	ln, err := console.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := console.New(nil, nil) // /api/series needs no cluster
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	hs := &http.Server{Handler: srv.Handler(addr)}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	noRedirect := func(jar http.CookieJar) *http.Client {
		return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	get := func(c *http.Client, path string) (*http.Response, string) {
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	url := "/?token=" + srv.Token()

	jar, _ := cookiejar.New(nil)
	first := noRedirect(jar)
	r, _ := get(first, url)
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("first use: %d", r.StatusCode)
	}
	var session *http.Cookie
	for _, c := range r.Cookies() {
		if c.Name == "palyra_console" {
			session = c
		}
	}
	if session == nil {
		t.Fatal("first use set no session cookie")
	}
	if session.Value == srv.Token() || strings.Contains(session.Value, srv.Token()) {
		t.Fatalf("the session cookie is the token itself: %q", session.Value)
	}
	if !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" || session.Secure {
		t.Fatalf("cookie attributes: %+v", session)
	}
	if loc := r.Header.Get("Location"); strings.Contains(loc, "token") {
		t.Fatalf("redirect keeps the token: %q", loc)
	}
	if r, _ := get(first, "/api/series"); r.StatusCode != http.StatusOK {
		t.Fatalf("with the session: %d", r.StatusCode)
	}

	// Someone else opens the same URL later: refused, and told why.
	jar2, _ := cookiejar.New(nil)
	other := noRedirect(jar2)
	r, body := get(other, url)
	if r.StatusCode != http.StatusForbidden {
		t.Fatalf("second use: %d, want 403", r.StatusCode)
	}
	for _, c := range r.Cookies() {
		if c.Name == "palyra_console" {
			t.Fatalf("second use set a cookie: %+v", c)
		}
	}
	if !strings.Contains(body, "already used") || !strings.Contains(body, "palyra console") {
		t.Fatalf("refusal page: %s", body)
	}
	if r, _ := get(other, "/api/series"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("second user reaches the API: %d", r.StatusCode)
	}
	// The token is no credential for the API either.
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/series", nil)
	req.AddCookie(&http.Cookie{Name: "palyra_console", Value: srv.Token()})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("token as cookie: %d", resp.StatusCode)
	}
	// The browser that signed in may open the link again from its history.
	if r, _ := get(first, url); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("signed-in browser reopening the link: %d", r.StatusCode)
	}
}
