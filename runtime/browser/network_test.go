package browser

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
)

// twoHosts starts an allowed site (reached as 127.0.0.1) and an "other"
// site (reached as localhost, a different host name) that the job is not
// granted; other counts whatever reaches it.
func twoHosts(t *testing.T, page func(other string) string) (site, other *countingServer, otherBase string) {
	other = newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		html(w, "other host")
	}))
	otherBase = "http://localhost:" + other.port()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { html(w, page(otherBase)) })
	mux.HandleFunc("GET /redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, otherBase+"/landing", http.StatusFound)
	})
	site = newCountingServer(t, mux)
	return site, other, otherBase
}

func assertUntouched(t *testing.T, other *countingServer) {
	t.Helper()
	if n, c := other.requests.Load(), other.conns.Load(); n != 0 || c != 0 {
		t.Errorf("the blocked host saw %d requests and %d connections, want none (each connection's first bytes: %s)", n, c, strings.Join(other.firstBytes(), ", "))
	}
}

// bothLayers returns executors enforcing the policy with both layers, with
// Fetch interception only and with the egress proxy only: each layer alone
// must refuse what the test expects.
func bothLayers(t *testing.T) map[string]*Executor {
	return map[string]*Executor{
		"both":       shared(t),
		"fetch only": sharedVariant(t, "fetch only", func(c *Config) { c.layers.noProxy = true }),
		"proxy only": sharedVariant(t, "proxy only", func(c *Config) { c.layers.noFetch = true }),
	}
}

func TestSubresourcesToOtherHostsAreBlocked(t *testing.T) {
	for name, e := range bothLayers(t) {
		t.Run(name, func(t *testing.T) {
			site, other, ob := twoHosts(t, func(ob string) string {
				return `<img id=img src="` + ob + `/img.png" onerror="imgst.textContent='img-error'"><span id=imgst></span>
<iframe id=frame src="` + ob + `/frame"></iframe>
<div id=fetchst></div>
<script>fetch("` + ob + `/api").then(() => { fetchst.textContent = "fetch-ok" }, () => { fetchst.textContent = "fetch-failed" })</script>`
			})
			r := run(t, e, loopbackSpec(script(t,
				map[string]any{"action": "navigate", "url": site.URL + "/"},
				map[string]any{"action": "wait_for", "text": "fetch-failed"},
				map[string]any{"action": "wait_for", "text": "img-error"},
				map[string]any{"action": "extract", "selector": "#fetchst", "name": "fetch"},
			)))
			mustOK(t, r)
			if v := values(t, r); v["fetch"] != "fetch-failed" {
				t.Errorf("fetch status %v, want fetch-failed", v["fetch"])
			}
			got := map[string]blockedLine{}
			for _, l := range blockedOf(t, r) {
				got[l.URL] = l
			}
			// Types as each layer names them: DevTools resource types
			// (fetch() is XHR there), or the request's Sec-Fetch-Dest.
			for url, types := range map[string][]string{
				ob + "/img.png": {"Image", "image"},
				ob + "/frame":   {"Document", "iframe"},
				ob + "/api":     {"XHR", "Fetch", "empty"},
			} {
				l, ok := got[url]
				if !ok {
					t.Errorf("%s not reported as blocked; stderr:\n%s", url, r.Stderr)
					continue
				}
				if !slices.Contains(types, l.Type) || !strings.Contains(l.Reason, `"localhost" is not in the job's --allow-host list`) {
					t.Errorf("%s reported as %+v, want type in %v and a reason naming the host", url, l, types)
				}
			}
			assertUntouched(t, other)
			if site.requests.Load() == 0 {
				t.Errorf("the allowed site saw no request")
			}
		})
	}
}

// TestProxyBackstop covers traffic that DevTools request interception does
// not see: WebSockets, a dedicated worker's fetch and a preconnect. The
// per-job egress proxy must refuse them all.
func TestProxyBackstop(t *testing.T) {
	for _, name := range []string{"both", "proxy only"} {
		t.Run(name, func(t *testing.T) { testProxyBackstop(t, bothLayers(t)[name]) })
	}
}

func testProxyBackstop(t *testing.T, e *Executor) {
	site, other, ob := twoHosts(t, func(ob string) string {
		ws := "ws" + strings.TrimPrefix(ob, "http")
		return `<link rel=preconnect href="` + ob + `"><div id=wsst></div><div id=workerst></div>
<script>
const ws = new WebSocket("` + ws + `/socket");
ws.onerror = () => { wsst.textContent = "ws-failed" };
ws.onopen = () => { wsst.textContent = "ws-open" };
const src = 'fetch("` + ob + `/from-worker").then(() => postMessage("worker-fetch-ok"), () => postMessage("worker-fetch-failed"))';
const w = new Worker(URL.createObjectURL(new Blob([src], {type: "text/javascript"})));
w.onmessage = e => { workerst.textContent = e.data };
</script>`
	})
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "wait_for", "text": "ws-failed"},
		map[string]any{"action": "wait_for", "text": "worker-fetch-failed"},
	)))
	mustOK(t, r)
	var urls []string
	for _, l := range blockedOf(t, r) {
		urls = append(urls, l.URL)
	}
	host := strings.TrimPrefix(ob, "http://")
	if !slices.Contains(urls, host) && !slices.ContainsFunc(urls, func(u string) bool { return strings.Contains(u, "/socket") }) {
		t.Errorf("the WebSocket to %s is not reported as blocked; stderr:\n%s", host, r.Stderr)
	}
	if !slices.Contains(urls, ob+"/from-worker") {
		t.Errorf("the worker's fetch is not reported as blocked; stderr:\n%s", r.Stderr)
	}
	assertUntouched(t, other)
}

func TestBlockedNavigation(t *testing.T) {
	for name, e := range bothLayers(t) {
		t.Run(name, func(t *testing.T) { testBlockedNavigation(t, e) })
	}
}

func testBlockedNavigation(t *testing.T, e *Executor) {
	site, other, ob := twoHosts(t, func(ob string) string {
		return `<a id=away href="` + ob + `/away">away</a>`
	})
	cases := []struct {
		name  string
		spec  runtime.Spec
		step  string
		about string
	}{
		{"other host", loopbackSpec(script(t,
			map[string]any{"action": "navigate", "url": ob + "/"})), "steps[0] (navigate)", `"localhost" is not in the job's --allow-host list`},
		{"redirect", loopbackSpec(script(t,
			map[string]any{"action": "navigate", "url": site.URL + "/redirect"})), "steps[0] (navigate)", `"localhost" is not in the job's --allow-host list`},
		{"link click", loopbackSpec(script(t,
			map[string]any{"action": "navigate", "url": site.URL + "/"},
			map[string]any{"action": "click", "selector": "#away"},
			map[string]any{"action": "wait_for", "text": "never there"})), "steps[", `"localhost" is not in the job's --allow-host list`},
		{"loopback without allow_private", runtime.Spec{Script: script(t,
			map[string]any{"action": "navigate", "url": site.URL + "/"}),
			AllowHosts: []string{"127.0.0.1"}}, "steps[0] (navigate)", "loopback; private targets need --allow-private"},
		{"localhost name without allow_private", runtime.Spec{Script: script(t,
			map[string]any{"action": "navigate", "url": ob + "/"}),
			AllowHosts: []string{"localhost"}}, "steps[0] (navigate)", "private targets need --allow-private"},
		{"no --allow-host", runtime.Spec{Script: script(t,
			map[string]any{"action": "navigate", "url": site.URL + "/"}), AllowPrivate: true}, "steps[0] (navigate)", "no --allow-host"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := site.requests.Load()
			r := run(t, e, c.spec)
			if r.Reason != runtime.ReasonBlocked || !strings.Contains(r.Message, c.step) || !strings.Contains(r.Message, c.about) {
				t.Fatalf("got %q %q, want blocked at %s because %s", r.Reason, r.Message, c.step, c.about)
			}
			if len(blockedOf(t, r)) == 0 {
				t.Errorf("the blocked navigation is not listed in stderr")
			}
			if c.spec.AllowPrivate == false && site.requests.Load() != before {
				t.Errorf("the site was reached although loopback is not granted")
			}
		})
	}
	assertUntouched(t, other)
}

// TestCrossSiteIframeSubresources: a cross-site iframe runs in its own
// renderer process, out of reach of the tab's request interception; its
// requests to a host the job is not granted must still be refused.
func TestCrossSiteIframeSubresources(t *testing.T) {
	for name, e := range bothLayers(t) {
		t.Run(name, func(t *testing.T) { testCrossSiteIframeSubresources(t, e) })
	}
}

func testCrossSiteIframeSubresources(t *testing.T, e *Executor) {
	third := newCountingServerOn(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	thirdBase := "http://127.0.0.2:" + third.port()
	frame := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		html(w, `<img src="`+thirdBase+`/pixel.png" onerror="parent.postMessage('frame-img-failed', '*')" onload="parent.postMessage('frame-img-loaded', '*')">`)
	}))
	frameBase := "http://localhost:" + frame.port()
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		html(w, `<div id=st></div><script>addEventListener("message", e => { st.textContent = e.data })</script>
<iframe src="`+frameBase+`/frame"></iframe>`)
	}))
	spec := loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "wait_for", "text": "frame-img-"},
		map[string]any{"action": "extract", "selector": "#st", "name": "status"},
	))
	spec.AllowHosts = []string{"127.0.0.1", "localhost"}
	r := run(t, e, spec)
	mustOK(t, r)
	if v := values(t, r); v["status"] != "frame-img-failed" {
		t.Errorf("iframe image: %v, want frame-img-failed", v["status"])
	}
	if frame.requests.Load() == 0 {
		t.Errorf("the allowed iframe host saw no request")
	}
	if !strings.Contains(string(r.Stderr), thirdBase+"/pixel.png") {
		t.Errorf("the iframe's image is not reported as blocked; stderr:\n%s", r.Stderr)
	}
	assertUntouched(t, third)
}

// TestLocalFilesUnreachable: a job's script cannot read the worker's files,
// whether it navigates, fetches or frames a file: URL.
func TestLocalFilesUnreachable(t *testing.T) {
	e := shared(t)
	site := alivePage(t)
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("top-secret-worker-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	fileURL := "file://" + secret
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "evaluate", "name": "fetched",
			"expression": `fetch(` + jsString(fileURL) + `).then(r => r.text(), e => "failed")`},
		map[string]any{"action": "evaluate", "name": "framed", "expression": `new Promise(done => {
  const f = document.createElement("iframe"); f.src = ` + jsString(fileURL) + `;
  f.onload = () => { try { done(f.contentDocument ? f.contentDocument.body.innerText : "opaque") } catch (e) { done("opaque") } };
  document.body.appendChild(f); setTimeout(() => done("no load"), 300) })`},
		map[string]any{"action": "evaluate", "name": "nav", "expression": `location.href = ` + jsString(fileURL) + `; "asked"`},
		map[string]any{"action": "evaluate", "name": "after", "expression": `new Promise(d => setTimeout(() => d(location.href + " " + document.body.innerText), 500))`},
	)))
	if strings.Contains(string(r.Stdout), "top-secret-worker-file") {
		t.Fatalf("the job read a local file: %s", r.Stdout)
	}
	mustOK(t, r)
	v := values(t, r)
	if v["fetched"] != "failed" {
		t.Errorf("fetch of a file: URL gave %v, want failed", v["fetched"])
	}
	if after, _ := v["after"].(string); !strings.HasPrefix(after, site+"/") {
		t.Errorf("after navigating to a file: URL the page is at %q, want it still on the site", after)
	}
}

// TestPopupsArePoliced: a window the page opens is a new tab outside the
// job tab's interception, but in the job's browser context, so the egress
// proxy still refuses its requests.
func TestPopupsArePoliced(t *testing.T) {
	e := shared(t)
	site, other, ob := twoHosts(t, func(ob string) string {
		return `<button id=open onclick="window.open('` + ob + `/popup'); st.textContent = 'opened'">open</button><div id=st></div>`
	})
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "click", "selector": "#open"},
		map[string]any{"action": "wait_for", "text": "opened"},
		map[string]any{"action": "evaluate", "name": "settle", "expression": `new Promise(d => setTimeout(() => d(true), 500))`},
	)))
	if r.Reason != runtime.ReasonNone && r.Reason != runtime.ReasonBlocked {
		t.Fatalf("got %q %q, want success or blocked", r.Reason, r.Message)
	}
	if !strings.Contains(string(r.Stderr), ob+"/popup") {
		t.Errorf("the popup's navigation is not reported as blocked; stderr:\n%s", r.Stderr)
	}
	assertUntouched(t, other)
}

// TestUnreachablePageFailsItsNavigation: a page the egress proxy cannot
// fetch (a closed port, a name that does not resolve) fails the navigate
// step with the reason, as it would without the proxy, instead of
// loading as a blank page (the proxy's empty 502) and letting the job
// "succeed".
func TestUnreachablePageFailsItsNavigation(t *testing.T) {
	e := shared(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, tc := range []struct {
		url, host, want string
	}{
		{"http://" + closed + "/", "127.0.0.1", "connection refused"},
		{"http://no-such-host.invalid/", "no-such-host.invalid", "no-such-host.invalid"},
	} {
		spec := runtime.Spec{AllowHosts: []string{tc.host}, AllowPrivate: true, Script: script(t,
			map[string]any{"action": "navigate", "url": tc.url},
			map[string]any{"action": "screenshot", "name": "page.png"},
		)}
		r := run(t, e, spec)
		if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "steps[0] (navigate)") ||
			!strings.Contains(r.Message, "page unreachable") || !strings.Contains(r.Message, tc.want) {
			t.Errorf("%s: got %q %q, want step_failed at the navigate saying the page is unreachable (%s)", tc.url, r.Reason, r.Message, tc.want)
		}
	}
	// Without --allow-private the policy resolves the name itself: one
	// that does not resolve is still unreachable, not blocked (it said
	// "blocked: cannot resolve host", against SCRIPT.md).
	r := run(t, e, runtime.Spec{AllowHosts: []string{"no-such-host.invalid"}, Script: script(t,
		map[string]any{"action": "navigate", "url": "http://no-such-host.invalid/"})})
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "page unreachable") || !strings.Contains(r.Message, "cannot resolve") {
		t.Errorf("a name that does not resolve, policy resolving: got %q %q, want step_failed saying the page is unreachable", r.Reason, r.Message)
	}
	// The next job on the same browser is unaffected.
	mustOK(t, run(t, e, loopbackSpec(script(t, map[string]any{"action": "navigate", "url": alivePage(t) + "/"}))))
}

// A navigation that fails for its own reason (here its load event never
// comes within the step's time) is not explained by a sub-resource the
// proxy could not fetch meanwhile: the message named a missing image as
// the page that was unreachable.
func TestSubresourceFailureDoesNotExplainANavigation(t *testing.T) {
	e := shared(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	release := make(chan struct{})
	defer close(release)
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow.png" {
			select { // holds the load event back
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		html(w, `<img src="http://`+closed+`/missing.png"><img src="/slow.png">`)
	}))
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/", "timeout_ms": 1500},
	)))
	if strings.Contains(r.Message, "unreachable") || strings.Contains(r.Message, "missing.png") {
		t.Errorf("got %q %q: a missing image explained the navigation's failure", r.Reason, r.Message)
	}
	if !strings.Contains(r.Message, "steps[0] (navigate)") {
		t.Errorf("got %q %q, want the navigate step to fail on its own reason", r.Reason, r.Message)
	}
}

// TestRequestPausedAtTheJobsEndIsNotLetThrough: a request interception
// still holds when the job ends (its step timed out waiting for the load
// the request holds back) must not get out when the job's tab is let go.
// Chromium lets paused requests through when the session that paused them
// detaches, so the browser context goes first. With the proxy layer off
// nothing else stands in the way.
func TestRequestPausedAtTheJobsEndIsNotLetThrough(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1, layers: layers{noProxy: true}})
	site, other, ob := twoHosts(t, func(ob string) string {
		return `<img src="` + ob + `/held.png">`
	})
	held := make(chan struct{}, 1)
	e.hooks.beforeDecide = func(tab context.Context, url string) {
		if !strings.Contains(url, "/held.png") {
			return
		}
		select { // it may be asked for again: say so once, block nothing
		case held <- struct{}{}:
		default:
		}
		select { // hold it past the job's end, as a busy machine might
		case <-tab.Done():
		case <-time.After(10 * time.Second):
		}
	}
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/", "timeout_ms": 1500})))
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "step timeout") {
		t.Fatalf("got %q %q, want the navigate step to time out waiting for the held image", r.Reason, r.Message)
	}
	select {
	case <-held:
	default:
		t.Fatalf("the image request was never intercepted: %s", ob)
	}
	time.Sleep(time.Second) // time for a request let through to arrive
	assertUntouched(t, other)
}
