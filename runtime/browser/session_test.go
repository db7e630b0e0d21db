package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// cookieSite sets a session cookie on login; /me says who it belongs to.
func cookieSite(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<h1>Sign in</h1><form method="POST" action="/login"><input name="user" placeholder="user"><input name="pass" type="password" placeholder="password"><button type="submit">Go</button></form>`)
	})
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("pass") != "hunter2" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: r.FormValue("user"), Path: "/"})
		html(w, fmt.Sprintf(`<div id="welcome">Welcome, %s!</div><a href="/me">me</a>`, r.FormValue("user")))
	})
	mux.HandleFunc("/me", func(w http.ResponseWriter, r *http.Request) {
		who := "nobody"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		html(w, `<div id="me">`+who+`</div>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func steps(t *testing.T, s ...map[string]any) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for _, m := range s {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// refOf finds the ref observe gave the element whose line matches re.
func refOf(t *testing.T, obs, re string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^(e[0-9]+) ` + re).FindStringSubmatch(obs)
	if m == nil {
		t.Fatalf("no element matching %q in:\n%s", re, obs)
	}
	return m[1]
}

// A session is driven step by step through a login form, observing in
// between and targeting elements by the refs observe gave; a second
// session at the same time has none of the first one's cookies; limits
// and unknown sessions give clear errors.
func TestSessionLoginStepByStepAndIsolation(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1})
	site := cookieSite(t)
	ctx := context.Background()
	spec := SessionSpec{Owner: "device:d-test", AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true}
	a, err := e.OpenSession(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.OpenSession(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Do(ctx, a.ID, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/"}, map[string]any{"action": "observe"}))
	if err != nil {
		t.Fatal(err)
	}
	obs := r.Observations[0]
	user, pass, submit := refOf(t, obs, `input\[text\] "user"`), refOf(t, obs, `input\[password\] "password"`), refOf(t, obs, `button "Go"`)
	if _, err := e.Do(ctx, a.ID, steps(t, map[string]any{"action": "type", "ref": user, "text": "ada"}, map[string]any{"action": "type", "ref": pass, "text": "hunter2"})); err != nil {
		t.Fatal(err)
	}
	r, err = e.Do(ctx, a.ID, steps(t, map[string]any{"action": "click", "ref": submit}, map[string]any{"action": "wait_for", "selector": "#welcome"},
		map[string]any{"action": "extract", "selector": "#welcome", "name": "greeting"}, map[string]any{"action": "observe"}))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]string
	if json.Unmarshal(r.Values, &vals); vals["greeting"] != "Welcome, ada!" || !strings.Contains(r.Observations[0], `a "me" -> /me`) {
		t.Fatalf("after login: values %s, observation:\n%s", r.Values, r.Observations[0])
	}
	me := func(id string) string {
		r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/me"}, map[string]any{"action": "extract", "selector": "#me", "name": "me"}))
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]string
		json.Unmarshal(r.Values, &v)
		return v["me"]
	}
	if got := me(a.ID); got != "ada" {
		t.Fatalf("session a is %q, want ada", got)
	}
	if got := me(b.ID); got != "nobody" {
		t.Fatalf("session b sees session a's cookie: %q", got)
	}
	png, mt, err := e.Screenshot(ctx, a.ID)
	if err != nil || mt != "image/png" || len(png) == 0 || len(png) > MaxSessionScreenshot {
		t.Fatalf("screenshot: %s %d bytes %v", mt, len(png), err)
	}
	if list := e.Sessions(); len(list) != 2 || list[0].ID != a.ID || list[0].Actions < 8 {
		t.Fatalf("sessions: %+v", list)
	}

	// Bad steps say what is wrong; the allowlist holds.
	for _, tc := range []struct {
		step map[string]any
		want string
	}{
		{map[string]any{"action": "click", "ref": "x1"}, "not an element reference"},
		{map[string]any{"action": "click", "ref": "e1", "selector": "a"}, `"ref" or "selector"`},
		{map[string]any{"action": "observe", "selector": "a"}, "observe takes no fields"},
		{map[string]any{"action": "fly"}, "unknown action"},
		{map[string]any{"action": "navigate", "url": "https://example.com/"}, "not in the session's --allow-host list"},
		// A ref no element carries fails at once, saying what to do (not
		// after the step's 5 s, naming an internal selector).
		{map[string]any{"action": "click", "ref": "e999"}, "ref e999 is not on the page"},
	} {
		if _, err := e.Do(ctx, a.ID, steps(t, tc.step)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.step, err, tc.want)
		}
	}
	if err := e.CloseSession(a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Do(ctx, a.ID, steps(t, map[string]any{"action": "observe"})); !errors.Is(err, ErrNoSession) {
		t.Fatalf("a closed session: %v", err)
	}
	if got := me(b.ID); got != "nobody" {
		t.Fatalf("session b after a closed: %q", got)
	}
}

// Closing a session twice is an error, as cancelling a job that ended is
// ('palyra job cancel': "job … is already completed"), and says so: the
// session is already closed, not that there is no such session (it said
// "no such browser session … on this worker"). An id the worker never
// had is still no such session.
func TestClosingASessionTwiceSaysItIsAlreadyClosed(t *testing.T) {
	e := shared(t)
	id := openLoopbackSession(t, e)
	if err := e.CloseSession(id); err != nil {
		t.Fatal(err)
	}
	err := e.CloseSession(id)
	if !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "browser session "+id+" is already closed (closed ") {
		t.Fatalf("closing it again: %v, want it to say the session is already closed", err)
	}
	if _, err := e.Session(id); !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "is already closed") {
		t.Fatalf("looking it up after: %v", err)
	}
	if err := e.CloseSession("bs-never"); !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "no such browser session bs-never") {
		t.Fatalf("closing a session never opened: %v", err)
	}
}

// A session idle past its TTL is closed; the cap on open sessions holds.
func TestSessionIdleTTLAndCap(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1, MaxSessions: 1, SessionIdleTTL: 300 * time.Millisecond})
	ctx := context.Background()
	s, err := e.OpenSession(ctx, SessionSpec{Owner: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.OpenSession(ctx, SessionSpec{Owner: "x"}); !errors.Is(err, ErrSessionsFull) || !strings.Contains(err.Error(), "1 of them yours; close one") {
		t.Fatalf("over the cap: %v", err)
	}
	// Another caller is not told to close sessions it cannot see.
	if _, err := e.OpenSession(ctx, SessionSpec{Owner: "y"}); !errors.Is(err, ErrSessionsFull) || !strings.Contains(err.Error(), "all held by other callers") {
		t.Fatalf("over the cap, for another caller: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(e.Sessions()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle session was never closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := e.Do(ctx, s.ID, steps(t, map[string]any{"action": "observe"})); !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "is already expired (unused for more than 300ms") {
		t.Fatalf("expired session: %v, want it to say the session expired, and why", err)
	}
	if err := e.CloseSession(s.ID); !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "is already expired") {
		t.Fatalf("closing an expired session: %v, want it to say the session already expired", err)
	}
	if _, err := e.OpenSession(ctx, SessionSpec{Owner: "x"}); err != nil {
		t.Fatalf("a slot should be free again: %v", err)
	}
}

// A navigation the page starts by itself between calls (a timer setting
// location) that the session's policy blocks is a note on the next call
// (once: observe, which listed it too, shows the page's state only); that
// call's steps run as usual (its first
// step failed "request to http://example.net/ blocked", whatever it was).
// A step during which the page's navigation is blocked still fails.
func TestSessionBlockedNavigationBetweenCallsIsANote(t *testing.T) {
	e := shared(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/leaves", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<p>here</p><script>setTimeout(() => { location = 'http://example.net/' }, 300)</script>`)
	})
	mux.HandleFunc("/other", func(w http.ResponseWriter, r *http.Request) { html(w, `<h1 id="o">other</h1>`) })
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	t.Cleanup(func() { e.CloseSession(id) })
	s, _ := e.session(id)

	r1, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/leaves"}))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(s.j.rec.blockedURLs(), "http://example.net/") {
		if time.Now().After(deadline) {
			t.Fatalf("the page's navigation was never blocked: %q", s.j.rec.blockedURLs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r2, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/other"},
		map[string]any{"action": "observe"}, map[string]any{"action": "extract", "selector": "#o", "name": "o"}))
	if err != nil {
		t.Fatalf("a call after the page's own blocked navigation: %v", err)
	}
	const want = `the page tried to load http://example.net/: host "example.net" is not in the session's --allow-host list`
	// Usually between the calls; on a slow machine the timer may fire
	// before the first call has read the page's URL.
	notes := strings.Join(append(r1.Notes, r2.Notes...), "\n")
	if !strings.Contains(notes, "navigation blocked") || !strings.Contains(notes, want) {
		t.Fatalf("notes %q, want one saying %q", notes, want)
	}
	if strings.Count(notes, want) != 1 || strings.Contains(r2.Observations[0], want) {
		t.Fatalf("the blocked navigation is not said once, in the notes: notes %q, observe:\n%s", notes, r2.Observations[0])
	}
	if v := sessionValues(t, r2); v["o"] != "other" || r2.URL != site.URL+"/other" {
		t.Fatalf("values %v, URL %q", v, r2.URL)
	}

	// Within a call, the step during which it happens fails, as in a job.
	_, err = e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/leaves"},
		map[string]any{"action": "wait_for", "text": "never shown"}))
	if err == nil || !strings.Contains(err.Error(), "steps[1] (wait_for): request to http://example.net/ blocked") {
		t.Fatalf("a step during which the page's navigation is blocked: %v", err)
	}
	r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "evaluate", "expression": "1", "name": "one"}))
	if err != nil || len(r.Notes) != 0 {
		t.Fatalf("the call after: %v, notes %q", err, r.Notes)
	}
}

// Within one call, as in a job: a name two steps give is refused before
// any step runs, with the job's message; unnamed values and artifacts are
// named by their step's index (two evaluates both wrote "value", two
// screenshots both step0.png).
func TestSessionCallNamesAreDistinct(t *testing.T) {
	e := shared(t)
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		html(w, `<h1 id="h">Title</h1><p id="p" style="display:none">hidden</p>`)
	}))
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	t.Cleanup(func() { e.CloseSession(id) })

	r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "evaluate", "expression": "1"}, map[string]any{"action": "evaluate", "expression": "2"},
		map[string]any{"action": "extract", "selector": "#h"},
		map[string]any{"action": "screenshot"}, map[string]any{"action": "screenshot"}, map[string]any{"action": "pdf"}))
	if err != nil {
		t.Fatal(err)
	}
	if v := sessionValues(t, r); len(v) != 3 || v["step1"] != 1.0 || v["step2"] != 2.0 || v["step3"] != "Title" {
		t.Fatalf("values %v, want step1, step2 and step3", v)
	}
	var names []string
	for _, a := range r.Artifacts {
		names = append(names, a.Name)
	}
	if !slices.Equal(names, []string{"step4.png", "step5.png", "step6.pdf"}) {
		t.Fatalf("artifacts %q", names)
	}

	for _, tc := range []struct {
		steps []map[string]any
		want  string
	}{
		{[]map[string]any{{"action": "evaluate", "expression": "1", "name": "x"}, {"action": "extract", "selector": "#h", "name": "x"}},
			`steps[1]: name "x" is already used by steps[0]; give each value a unique name`},
		{[]map[string]any{{"action": "screenshot", "name": "a.png"}, {"action": "observe"}, {"action": "screenshot", "name": "a.png"}},
			`steps[2]: artifact name "a.png" is already used by steps[0]; give each artifact a unique name`},
		{[]map[string]any{{"action": "screenshot", "name": "step1.png"}, {"action": "screenshot"}},
			`steps[1]: artifact name "step1.png" is already used by steps[0]`},
	} {
		before, _ := e.Session(id)
		r, err := e.Do(ctx, id, steps(t, tc.steps...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.steps, err, tc.want)
		}
		if after, _ := e.Session(id); len(r.Artifacts) != 0 || after.Actions != before.Actions {
			t.Errorf("%v: a refused call ran steps: %d artifacts, actions %d → %d", tc.steps, len(r.Artifacts), before.Actions, after.Actions)
		}
	}
	// Calls are separate: each may use a name again.
	for range 2 {
		if r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "evaluate", "expression": "3", "name": "x"})); err != nil || sessionValues(t, r)["x"] != 3.0 {
			t.Fatalf("a name again in another call: %v %s", err, r.Values)
		}
	}
}

// A step on a ref names the ref in its errors, not the internal selector
// it stands for ("typing into [data-palyra-ref=...]").
func TestSessionRefErrorsNameTheRef(t *testing.T) {
	e := shared(t)
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		html(w, `<h1>Title</h1><button id="b" onclick="this.style.display='none'">Hide me</button>`)
	}))
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	t.Cleanup(func() { e.CloseSession(id) })
	r, err := e.Do(ctx, id, steps(t, map[string]any{"action": "navigate", "url": site.URL + "/"}, map[string]any{"action": "observe"}))
	if err != nil {
		t.Fatal(err)
	}
	h1, btn := refOf(t, r.Observations[0], `h1 "Title"`), refOf(t, r.Observations[0], `button "Hide me"`)
	_, err = e.Do(ctx, id, steps(t, map[string]any{"action": "type", "ref": h1, "text": "x"}))
	if err == nil || !strings.Contains(err.Error(), "typing into ref "+h1+": the element cannot take keyboard input") || strings.Contains(err.Error(), "data-palyra-ref") {
		t.Fatalf("typing into a heading: %v", err)
	}
	_, err = e.Do(ctx, id, steps(t, map[string]any{"action": "click", "ref": btn}, map[string]any{"action": "wait_for", "ref": btn, "timeout_ms": 300}))
	if err == nil || !strings.Contains(err.Error(), "gave up waiting for ref "+btn+" to be visible") || strings.Contains(err.Error(), "data-palyra-ref") {
		t.Fatalf("waiting for a hidden ref: %v", err)
	}
}

// A step that hits a limit says what to do about it in the call's error
// (message and hint whole), as it did before results kept the two apart.
func TestSessionLimitErrorsSayTheFix(t *testing.T) {
	e := shared(t)
	ctx := context.Background()
	id := openLoopbackSession(t, e)
	t.Cleanup(func() { e.CloseSession(id) })
	_, err := e.Do(ctx, id, steps(t, map[string]any{"action": "evaluate", "expression": "'x'.repeat(300000)", "name": "big"}))
	if err == nil || !strings.Contains(err.Error(), "over the job's limit") || !strings.Contains(err.Error(), "; extract less") {
		t.Fatalf("a value over the session's limit: %v", err)
	}
}
