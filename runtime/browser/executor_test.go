package browser

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/runtime"
)

// loginSite serves a form that posts to /login, which sets a session
// cookie and redirects to /home, which greets the user it finds.
func loginSite(t testing.TB) *countingServer {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<form method=post action=/login>
<input id=user name=user> <input id=pass name=pass type=password>
<button id=login type=submit>Log in</button></form>`)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("pass") != "s3cret" {
			http.Error(w, "bad password", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "user", Value: r.FormValue("user"), Path: "/"})
		http.Redirect(w, r, "/home", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /home", func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("user")
		if err != nil {
			http.Error(w, "not logged in", http.StatusUnauthorized)
			return
		}
		html(w, `<h1 id=welcome style="background:#fc0;padding:20px">Welcome, `+c.Value+`</h1>
<a id=out href="/logout">log out</a>`)
	})
	return newCountingServer(t, mux)
}

func TestLoginFlow(t *testing.T) {
	e := shared(t)
	site := loginSite(t)
	for _, submit := range []map[string]any{
		{"action": "click", "selector": "#login"},
		{"action": "press", "key": "Enter"},
	} {
		t.Run(submit["action"].(string), func(t *testing.T) {
			r := run(t, e, loopbackSpec(script(t,
				map[string]any{"action": "navigate", "url": site.URL + "/"},
				map[string]any{"action": "type", "selector": "#user", "text": "bob"},
				map[string]any{"action": "type", "selector": "#pass", "text": "s3cret"},
				submit,
				map[string]any{"action": "wait_for", "selector": "#welcome"},
				map[string]any{"action": "wait_for", "text": "Welcome"},
				map[string]any{"action": "extract", "selector": "#welcome", "name": "greeting"},
				map[string]any{"action": "extract", "selector": "#out", "attribute": "href", "name": "logout"},
				map[string]any{"action": "evaluate", "expression": "1+2", "name": "sum"},
				map[string]any{"action": "evaluate", "expression": "Promise.resolve({ok: true, n: [1, 2]})", "name": "obj"},
				map[string]any{"action": "screenshot", "name": "page.png"},
				map[string]any{"action": "screenshot", "name": "welcome.png", "selector": "#welcome"},
				map[string]any{"action": "pdf", "name": "page.pdf"},
			)))
			mustOK(t, r)
			v := values(t, r)
			if v["greeting"] != "Welcome, bob" {
				t.Errorf("greeting = %#v, want %q", v["greeting"], "Welcome, bob")
			}
			if v["logout"] != "/logout" {
				t.Errorf("logout = %#v, want /logout", v["logout"])
			}
			if v["sum"] != float64(3) {
				t.Errorf("sum = %#v, want 3", v["sum"])
			}
			if obj, _ := v["obj"].(map[string]any); obj["ok"] != true {
				t.Errorf("obj = %#v, want {ok:true,…}", v["obj"])
			}
			if len(r.Stderr) != 0 {
				t.Errorf("stderr = %q, want no blocked requests", r.Stderr)
			}
			dumpArtifacts(t, r)
			if len(r.Artifacts) != 3 {
				t.Fatalf("got %d artifacts, want 3", len(r.Artifacts))
			}
			page := checkPNG(t, r.Artifacts[0], "page.png")
			if page.Dx() != DefaultWindowWidth || page.Dy() < 300 {
				t.Errorf("page screenshot is %v, want the %dpx-wide viewport", page, DefaultWindowWidth)
			}
			el := checkPNG(t, r.Artifacts[1], "welcome.png")
			if el.Dx() >= page.Dx() && el.Dy() >= page.Dy() || el.Dy() < 20 {
				t.Errorf("element screenshot is %v, want the heading only (page %v)", el, page)
			}
			pdf := r.Artifacts[2]
			if pdf.Name != "page.pdf" || pdf.MediaType != "application/pdf" || !bytes.HasPrefix(pdf.Data, []byte("%PDF-")) {
				t.Errorf("pdf artifact %q %q starts %q, want a PDF", pdf.Name, pdf.MediaType, pdf.Data[:min(8, len(pdf.Data))])
			}
		})
	}
}

func checkPNG(t *testing.T, a runtime.Artifact, name string) image.Rectangle {
	t.Helper()
	if a.Name != name || a.MediaType != "image/png" {
		t.Fatalf("artifact %q (%s), want %q (image/png)", a.Name, a.MediaType, name)
	}
	img, err := png.Decode(bytes.NewReader(a.Data))
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", name, err)
	}
	return img.Bounds()
}

func TestStepFailureKeepsEarlierOutput(t *testing.T) {
	e := shared(t)
	site := loginSite(t)
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "evaluate", "expression": "document.title", "name": "title"},
		map[string]any{"action": "click", "selector": "#nope", "timeout_ms": 300},
	)))
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "steps[2] (click)") || !strings.Contains(r.Message, "#nope") {
		t.Fatalf("got %q %q, want step_failed naming steps[2] and #nope", r.Reason, r.Message)
	}
	if v := values(t, r); v["title"] != "t" {
		t.Errorf("stdout = %s, want the title extracted before the failure", r.Stdout)
	}

	r = run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "click", "selector": "#[bad"},
	)))
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "not a valid selector") {
		t.Fatalf("invalid selector: got %q %q, want step_failed saying the selector is invalid", r.Reason, r.Message)
	}

	r = run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "evaluate", "expression": "(() => { throw new Error('boom') })()", "name": "x"},
	)))
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "boom") {
		t.Fatalf("exception: got %q %q, want step_failed carrying the exception", r.Reason, r.Message)
	}
}

// A navigate step whose page answers an HTTP error (4xx, 5xx) loads it as
// any page (a 404 page is a page), and the job's Stderr records the
// status of the main document, after redirects: the CLI's --fail and its
// note read it there. A page that answers 200 records nothing.
func TestNavigateRecordsAnHTTPErrorStatus(t *testing.T) {
	e := shared(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { html(w, `<h1>home</h1>`) })
	mux.HandleFunc("GET /gone", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/missing", http.StatusFound) })
	mux.HandleFunc("GET /missing", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `<h1>no such page</h1>`)
	})
	mux.HandleFunc("GET /broken", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "oops", http.StatusBadGateway) })
	site := newCountingServer(t, mux)
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "navigate", "url": site.URL + "/gone"},
		map[string]any{"action": "extract", "selector": "h1", "name": "h1"},
		map[string]any{"action": "navigate", "url": site.URL + "/broken"},
	)))
	mustOK(t, r)
	if v := values(t, r); v["h1"] != "no such page" {
		t.Errorf("values %s, want the 404 page's heading", r.Stdout)
	}
	want := []statusLine{
		{Status: 404, StatusText: "Not Found", URL: site.URL + "/missing", Step: 1},
		{Status: 502, StatusText: "Bad Gateway", URL: site.URL + "/broken", Step: 3},
	}
	var got []statusLine
	for _, line := range strings.Split(strings.TrimSpace(string(r.Stderr)), "\n") {
		var l statusLine
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Status == 0 {
			t.Fatalf("stderr line %q is not an HTTP status line (%v):\n%s", line, err, r.Stderr)
		}
		got = append(got, l)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("status lines %+v, want %+v", got, want)
	}
}

func TestDetect(t *testing.T) {
	p := requireChromium(t)
	if !usable(p) {
		t.Fatalf("Detect returned %s, which is not usable", p)
	}
	if usable("/nonexistent/chromium") {
		t.Errorf("a missing path counts as usable")
	}
	// Debian's /usr/bin/chromium is a shell script; the executor must run
	// the real binary so it can watch and kill the browser process.
	script := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec "+p+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if usable(script) {
		t.Errorf("a wrapper script counts as usable")
	}
}
