package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
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

// A session idle past its TTL is closed; the cap on open sessions holds.
func TestSessionIdleTTLAndCap(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1, MaxSessions: 1, SessionIdleTTL: 300 * time.Millisecond})
	ctx := context.Background()
	s, err := e.OpenSession(ctx, SessionSpec{Owner: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.OpenSession(ctx, SessionSpec{Owner: "x"}); !errors.Is(err, ErrSessionsFull) {
		t.Fatalf("over the cap: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(e.Sessions()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle session was never closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := e.Do(ctx, s.ID, steps(t, map[string]any{"action": "observe"})); !errors.Is(err, ErrNoSession) {
		t.Fatalf("expired session: %v", err)
	}
	if _, err := e.OpenSession(ctx, SessionSpec{Owner: "x"}); err != nil {
		t.Fatalf("a slot should be free again: %v", err)
	}
}
