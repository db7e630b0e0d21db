package browser

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// openLoopbackSession opens a session on e that may reach 127.0.0.1.
func openLoopbackSession(t *testing.T, e *Executor) string {
	t.Helper()
	s, err := e.OpenSession(context.Background(), SessionSpec{Owner: "device:d-test", AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// keptCookieSite serves body at / with a cookie k=kept, and at /me the
// cookie's value (or "none"): a page replaced in the same browser context
// keeps it.
func keptCookieSite(t *testing.T, body string) *countingServer {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "k", Value: "kept", Path: "/"})
		html(w, body)
	})
	mux.HandleFunc("/me", func(w http.ResponseWriter, r *http.Request) {
		v := "none"
		if c, err := r.Cookie("k"); err == nil {
			v = c.Value
		}
		html(w, `<p id="me">`+v+`</p>`)
	})
	return newCountingServer(t, mux)
}

// sessionValues decodes the values of a Do call.
func sessionValues(t *testing.T, r SessionResult) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Values, &v); err != nil {
		t.Fatalf("values %q: %v", r.Values, err)
	}
	return v
}

// A session step whose script never returns times out, and the script is
// stopped: the session answers again at once, on the same page (it stayed
// stuck for good, every later step timing out, with the renderer spinning).
// Observe, which is not a script step, recovers the same way.
func TestSessionStepTimeoutStopsTheScript(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1})
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { html(w, `<p id="p">still here</p>`) }))
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	if _, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/"})); err != nil {
		t.Fatal(err)
	}
	_, err := e.Do(ctx, id, steps(t, map[string]any{"action": "evaluate", "expression": "(()=>{while(true){}})()", "name": "v", "timeout_ms": 1000}))
	if err == nil || !strings.Contains(err.Error(), "steps[0] (evaluate): step timeout of 1s (set by the step's timeout_ms) ran out; the page's script was stopped") {
		t.Fatalf("a script that never returns: %v", err)
	}
	start := time.Now()
	r, err := e.Do(ctx, id, steps(t,
		map[string]any{"action": "extract", "selector": "#p", "name": "p"},
		map[string]any{"action": "observe"},
		map[string]any{"action": "navigate", "url": site.URL + "/again"},
	))
	if err != nil {
		t.Fatalf("the session after the stopped script: %v", err)
	}
	if v := sessionValues(t, r); v["p"] != "still here" || !strings.Contains(r.Observations[0], site.URL+"/>") || r.URL != site.URL+"/again" {
		t.Fatalf("after the stopped script: values %v, observation %q, URL %q", v, r.Observations[0], r.URL)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the next call took %s", d)
	}

	// A script that starts spinning between calls, found by observe.
	if _, err := e.Do(ctx, id, steps(t, map[string]any{"action": "evaluate", "expression": "setTimeout(() => { for (;;) {} }, 500), 1", "name": "armed"})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	// On a loaded machine the timer may fire later: observe until the
	// page spins.
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err = e.Do(ctx, id, steps(t, map[string]any{"action": "observe"}))
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "steps[0] (observe): step timeout of 5s (set by the session's default) ran out; the page's script was stopped") {
		t.Fatalf("observe on a spinning page: %v", err)
	}
	r, err = e.Do(ctx, id, steps(t, map[string]any{"action": "extract", "selector": "#p", "name": "p"}))
	if v := sessionValues(t, r); err != nil || v["p"] != "still here" {
		t.Fatalf("after observe stopped the script: %v %v", v, err)
	}
}

// A page whose script starts spinning again as soon as it is stopped (a
// timer) cannot be saved: the session's page is replaced by a blank one in
// the same browser context (its cookies kept), and the session goes on.
func TestSessionPageThatKeepsSpinningIsReplaced(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1})
	site := keptCookieSite(t, `<p id="p">spinner</p>`)
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	// The spinning starts after the call has returned.
	if _, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "evaluate", "expression": "setTimeout(() => setInterval(() => { for (;;) {} }, 0), 500), 1", "name": "armed"})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	_, err := e.Do(ctx, id, steps(t, map[string]any{"action": "extract", "selector": "#p", "name": "p", "timeout_ms": 1000}))
	if err == nil || !strings.Contains(err.Error(), "steps[0] (extract): step timeout of 1s (set by the step's timeout_ms) ran out; the page's script did not stop, so the session's page was replaced by a blank one") {
		t.Fatalf("a page that keeps spinning: %v", err)
	}
	start := time.Now()
	r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "observe"}, map[string]any{"action": "navigate", "url": site.URL + "/me"}, map[string]any{"action": "extract", "selector": "#me", "name": "me"}))
	if err != nil {
		t.Fatalf("the session after its page was replaced: %v", err)
	}
	if v := sessionValues(t, r); v["me"] != "kept" || !strings.Contains(r.Observations[0], "<about:blank>") {
		t.Fatalf("after the page was replaced: values %v (want the cookie kept), observation %q", v, r.Observations[0])
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the next call took %s", d)
	}

	// Spinning at once, after the call's last step: the call still
	// answers, its notes say what happened.
	r, err = e.Do(ctx, id, steps(t, map[string]any{"action": "evaluate", "expression": "setInterval(() => { for (;;) {} }, 0), 1", "name": "armed"}))
	if err != nil || r.URL != "about:blank" || len(r.Notes) != 1 ||
		!strings.Contains(r.Notes[0], "the page stopped answering after the last step; the page's script did not stop, so the session's page was replaced") {
		t.Fatalf("a page that spins after the last step: %v, URL %q, notes %q", err, r.URL, r.Notes)
	}
	r, err = e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/me"}, map[string]any{"action": "extract", "selector": "#me", "name": "me"}))
	if v := sessionValues(t, r); err != nil || v["me"] != "kept" {
		t.Fatalf("after the second replacement: %v %v", v, err)
	}
}

// A session whose page's renderer dies goes on, on a blank page in the
// same browser context (cookies kept): the call that was running says the
// page crashed and was replaced, and a crash between calls is a note on
// the next call (every later call failed "page crashed" until the session
// ended).
func TestSessionPageCrashIsReplaced(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1})
	site := keptCookieSite(t, `<p id="p">page</p>`)
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	if _, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/"})); err != nil {
		t.Fatal(err)
	}
	pid := e.sessionBrowserPID()
	killRenderers := func() {
		rs := descendants(pid, "--type=renderer")
		if len(rs) == 0 {
			t.Error("no renderer to kill")
		}
		for _, r := range rs {
			_ = syscall.Kill(r, syscall.SIGKILL)
		}
	}

	// Mid-step.
	started := onStep(e, 0)
	go func() { <-started; killRenderers() }()
	_, err := e.Do(ctx, id, steps(t, map[string]any{"action": "wait_for", "text": "never shown", "timeout_ms": 20000}))
	e.hooks.stepStarted = nil
	if err == nil || !strings.Contains(err.Error(), "steps[0] (wait_for): page crashed") || !strings.Contains(err.Error(), "replaced by a blank one") {
		t.Fatalf("a renderer killed mid-step: %v", err)
	}
	r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/me"}, map[string]any{"action": "extract", "selector": "#me", "name": "me"}))
	if err != nil {
		t.Fatalf("the session after its page crashed: %v", err)
	}
	if v := sessionValues(t, r); v["me"] != "kept" {
		t.Fatalf("after the crash: values %v, want the cookie kept", v)
	}

	// Between calls.
	killRenderers()
	deadline := time.Now().Add(10 * time.Second)
	for s, _ := e.session(id); !s.j.pageHasCrashed(); {
		if time.Now().After(deadline) {
			t.Fatal("the crash was never noticed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err = e.Do(ctx, id, steps(t, map[string]any{"action": "observe"}, map[string]any{"action": "navigate", "url": site.URL + "/me"}, map[string]any{"action": "extract", "selector": "#me", "name": "me"}))
	if err != nil {
		t.Fatalf("the call after a crash between calls: %v", err)
	}
	if v := sessionValues(t, r); v["me"] != "kept" || !strings.Contains(r.Observations[0], "<about:blank>") || len(r.Notes) != 1 ||
		!strings.Contains(r.Notes[0], "the page crashed after the last call") {
		t.Fatalf("after a crash between calls: values %v, observation %q, notes %q", v, r.Observations[0], r.Notes)
	}
	if got := e.sessionBrowserPID(); got != pid {
		t.Errorf("browser PID %d after a renderer crash, want the same browser %d", got, pid)
	}
}

// sessionBrowserPID is the sessions' browser's process ID.
func (e *Executor) sessionBrowserPID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess.cur == nil {
		return 0
	}
	return e.sess.cur.pid
}

// A page that starts spinning between calls is stopped by the reaper (once
// two of its checks in a row got no answer), not left at 100% of a core
// until the next call runs out of time on it; the next call says so in its
// notes and runs on the same page.
func TestIdleSessionPageThatSpinsIsStopped(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1, SessionIdleTTL: 8 * time.Second}) // checked every 2 s
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { html(w, `<p id="p">idle</p>`) }))
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	if _, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "evaluate", "expression": "setTimeout(() => { for (;;) {} }, 300), 1", "name": "armed"})); err != nil {
		t.Fatal(err)
	}
	s, err := e.session(id)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		n := len(s.idleNotes)
		s.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the spinning page of an idle session was not stopped")
		}
	}
	r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "extract", "selector": "#p", "name": "p"}))
	if err != nil {
		t.Fatalf("the call after the idle page was stopped: %v", err)
	}
	if v := sessionValues(t, r); v["p"] != "idle" || len(r.Notes) != 1 || r.Notes[0] != "the page stopped answering between calls; its script was stopped" {
		t.Fatalf("after the idle page was stopped: values %v, notes %q", v, r.Notes)
	}
}
