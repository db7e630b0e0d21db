package browser

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// dialogSite serves a page that opens an alert, a confirm and a prompt
// while it loads, and a button that arms a beforeunload prompt; /next is
// a plain page, /ask confirms on a click, /framed holds a cross-site
// (localhost) iframe that opens dialogs.
func dialogSite(t *testing.T) *countingServer {
	var site *countingServer
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<script>alert("hello from the page")</script>
<p id="r"></p>
<script>document.getElementById("r").textContent = JSON.stringify({confirm: confirm("sure?"), prompt: prompt("name?", "default")})</script>
<button id="arm" onclick="window.addEventListener('beforeunload', e => { e.preventDefault(); e.returnValue = 'stay?'; }); this.textContent = 'armed'">arm</button>`)
	})
	mux.HandleFunc("/next", func(w http.ResponseWriter, r *http.Request) { html(w, `<p id="n">next page</p>`) })
	mux.HandleFunc("/ask", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<button id="ask" onclick="document.getElementById('a').textContent = String(confirm('delete it all?'))">ask</button><p id="a"></p>`)
	})
	mux.HandleFunc("/framed", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<iframe src="http://localhost:`+site.port()+`/inner" onload="document.getElementById('d').textContent = 'framed'"></iframe><p id="d"></p>`)
	})
	mux.HandleFunc("/inner", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<script>alert("the frame was told " + confirm("inner?"))</script>`)
	})
	site = newCountingServer(t, mux)
	return site
}

// dialogLines parses the dialog lines of a job's Stderr.
func dialogLines(t *testing.T, stderr []byte) []dialogLine {
	t.Helper()
	var out []dialogLine
	for _, line := range strings.Split(strings.TrimSpace(string(stderr)), "\n") {
		if !strings.Contains(line, `"dialog"`) {
			continue
		}
		var d dialogLine
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("stderr line %q: %v", line, err)
		}
		out = append(out, d)
	}
	return out
}

// JavaScript dialogs do not stall a job (navigate waited for a load event
// that an open alert holds back, and failed at its step timeout): alerts
// are accepted, confirms and prompts dismissed, beforeunload accepted so
// the navigation proceeds, and each is listed in Stderr. A cross-site
// iframe's dialogs are answered too.
func TestJobDialogsAreDismissedAndReported(t *testing.T) {
	e := shared(t)
	site := dialogSite(t)
	spec := loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/", "timeout_ms": 3000},
		map[string]any{"action": "extract", "selector": "#r", "name": "answers"},
		map[string]any{"action": "click", "selector": "#arm"},
		map[string]any{"action": "wait_for", "text": "armed"},
		map[string]any{"action": "navigate", "url": site.URL + "/next", "timeout_ms": 3000},
		map[string]any{"action": "extract", "selector": "#n", "name": "next"},
		map[string]any{"action": "navigate", "url": site.URL + "/framed", "timeout_ms": 3000},
		map[string]any{"action": "wait_for", "text": "framed", "timeout_ms": 3000},
	))
	spec.AllowHosts = append(spec.AllowHosts, "localhost")
	r := run(t, e, spec)
	mustOK(t, r)
	if v := values(t, r); v["answers"] != `{"confirm":false,"prompt":null}` || v["next"] != "next page" {
		t.Fatalf("values %s", r.Stdout)
	}
	got := dialogLines(t, r.Stderr)
	want := []dialogLine{
		{Type: "alert", Message: "hello from the page", URL: site.URL + "/", Handled: "accepted"},
		{Type: "confirm", Message: "sure?", URL: site.URL + "/", Handled: "dismissed"},
		{Type: "prompt", Message: "name?", URL: site.URL + "/", Handled: "dismissed"},
		{Type: "beforeunload", URL: site.URL + "/", Handled: "accepted"},
		{Type: "confirm", Message: "inner?", URL: "http://localhost:" + site.port() + "/inner", Handled: "dismissed"},
		{Type: "alert", Message: "the frame was told false", URL: "http://localhost:" + site.port() + "/inner", Handled: "accepted"},
	}
	for i := range got {
		if got[i].Type == "beforeunload" {
			got[i].Message = "" // Chromium's own words, not the page's
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("dialogs in stderr:\n%s\nwant %+v", r.Stderr, want)
	}
	if b := blockedOf(t, r); len(b) != len(want) { // the dialog lines, and nothing blocked
		t.Fatalf("stderr lines: %+v", b)
	}
}

// In a session, a dialog neither fails the step nor sticks the session:
// the call's Notes say what was answered, once; observe shows the page's
// state only (it listed the dialogs too, so a call with an observe showed
// each twice).
func TestSessionDialogsAreDismissedAndReported(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1})
	site := dialogSite(t)
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/", "timeout_ms": 3000}))
	if err != nil {
		t.Fatalf("navigating to a page with dialogs: %v", err)
	}
	wantNotes := []string{
		`dialog: alert "hello from the page" from ` + site.URL + `/: accepted`,
		`dialog: confirm "sure?" from ` + site.URL + `/: dismissed`,
		`dialog: prompt "name?" from ` + site.URL + `/: dismissed`,
	}
	if !slices.Equal(r.Notes, wantNotes) {
		t.Fatalf("notes %q, want %q", r.Notes, wantNotes)
	}
	r, err = e.Do(ctx, id, steps(t, map[string]any{"action": "observe"}, map[string]any{"action": "navigate", "url": site.URL + "/ask"},
		map[string]any{"action": "click", "selector": "#ask"}, map[string]any{"action": "wait_for", "text": "false"}, map[string]any{"action": "observe"}))
	if err != nil {
		t.Fatalf("after the dialogs: %v", err)
	}
	for _, o := range r.Observations {
		if strings.Contains(o, "dialog:") {
			t.Errorf("observe shows a dialog, which the call's notes say already:\n%s", o)
		}
	}
	ask := `dialog: confirm "delete it all?" from ` + site.URL + `/ask: dismissed`
	if !slices.Equal(r.Notes, []string{ask}) {
		t.Errorf("notes %q, want the new dialog only, once", r.Notes)
	}
}

// A page that opens dialogs in a loop costs bounded output: the same
// dialog in a row is one line with a count, and distinct ones stop at
// maxDialogLines.
func TestDialogReportIsBounded(t *testing.T) {
	rec := newRecorder(1<<20, 0, 0)
	for range 1000 {
		rec.dialog("alert", "again", "http://x/", true)
	}
	for i := range maxDialogLines + 10 {
		rec.dialog("confirm", strings.Repeat("m", i), "http://x/", false)
	}
	got := dialogLines(t, rec.stderr())
	if len(got) != maxDialogLines || got[0].Count != 1000 || got[1].Count != 0 {
		t.Fatalf("%d lines, first %+v, second %+v", len(got), got[0], got[1])
	}
	if !strings.HasSuffix(string(rec.stderr()), "{\"dialogs_more\":11}\n") {
		t.Fatalf("stderr does not end with the count of the rest:\n%s", rec.stderr())
	}
	notes := rec.takeCallNotes()
	if len(notes) != maxDialogLines+1 || notes[0] != `dialog: alert "again" from http://x/: accepted (1000 times)` || notes[maxDialogLines] != "dialog: 11 more not shown" {
		t.Fatalf("notes: %d, first %q, last %q", len(notes), notes[0], notes[len(notes)-1])
	}
	if n := rec.takeCallNotes(); len(n) != 0 {
		t.Fatalf("notes taken twice: %q", n)
	}
}
