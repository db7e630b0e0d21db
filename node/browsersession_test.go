package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/runtime/browser"
)

func loginCookieSite(t *testing.T) *httptest.Server {
	page := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><html><head><title>t</title></head><body>%s</body></html>", body)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		page(w, `<h1>Sign in</h1><form method="POST" action="/login"><input name="user" placeholder="user"><input name="pass" type="password" placeholder="password"><button type="submit">Go</button></form>`)
	})
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("pass") != "hunter2" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: r.FormValue("user"), Path: "/"})
		page(w, `<div id="welcome">Welcome, `+r.FormValue("user")+`!</div>`)
	})
	mux.HandleFunc("/me", func(w http.ResponseWriter, r *http.Request) {
		who := "nobody"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		page(w, `<div id="me">`+who+`</div>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// A browser session on one worker is driven through a login form in three
// calls made through three different nodes, observing between steps; a
// second session at the same time has none of its cookies; closed, it is
// gone; a session left idle past its TTL is gone too.
func TestBrowserSessionAcrossNodes(t *testing.T) {
	if _, ok := browser.Detect(); !ok {
		if testing.Short() {
			t.Skip("no Chromium; " + browser.InstallHint)
		}
		t.Fatal("no Chromium: " + browser.InstallHint + " (make deps installs it)")
	}
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	n2 := join(t, op, first.Addr(), t.TempDir())
	worker := joinWith(t, op, first.Addr(), node.Config{BrowserSlots: 1, BrowserSessionIdleTTL: 8 * time.Second})
	tc := &testCluster{t: t, first: first, nodes: []*node.Node{first, n2, worker}}
	tc.waitHealthy(3)
	via := []*client.Client{op, operator(t, first, n2.Addr()), operator(t, first, worker.Addr())}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitFor(t, "the worker's browser capacity in gossip", time.Minute, func() bool {
		l, err := op.Node.ListNodes(ctx, connect.NewRequest(&palyrav1.ListNodesRequest{}))
		if err != nil {
			return false
		}
		for _, n := range l.Msg.Nodes {
			if n.Id == worker.ID() && n.Capacity["browser"] > 0 {
				return true
			}
		}
		return false
	})
	// A worker an operator made ineligible opens no session (jobs stayed
	// queued while a session opened there); eligible again, it does.
	if _, err := op.Node.SetSchedulable(ctx, connect.NewRequest(&palyrav1.SetSchedulableRequest{NodeId: worker.ID(), Eligible: false})); err != nil {
		t.Fatal(op.Explain(err))
	}
	waitFor(t, "the ineligible worker refusing a session", 30*time.Second, func() bool {
		_, err := op.Browser.OpenSession(ctx, connect.NewRequest(&palyrav1.OpenBrowserSessionRequest{AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true}))
		return err != nil && strings.Contains(op.Explain(err).Message, "take no new work")
	})
	if _, err := op.Node.SetSchedulable(ctx, connect.NewRequest(&palyrav1.SetSchedulableRequest{NodeId: worker.ID(), Eligible: true})); err != nil {
		t.Fatal(op.Explain(err))
	}
	site := loginCookieSite(t)
	open := func() *palyrav1.BrowserSession {
		r, err := via[0].Browser.OpenSession(ctx, connect.NewRequest(&palyrav1.OpenBrowserSessionRequest{AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true}))
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		return r.Msg.Session
	}
	do := func(cl *client.Client, id string, steps ...string) *palyrav1.BrowserSessionResponse {
		t.Helper()
		var raw [][]byte
		for _, s := range steps {
			raw = append(raw, []byte(s))
		}
		r, err := cl.Browser.Do(ctx, connect.NewRequest(&palyrav1.BrowserDoRequest{Id: id, Steps: raw}))
		if err != nil {
			t.Fatalf("%v: %v", steps, cl.Explain(err))
		}
		return r.Msg
	}
	ref := func(obs, re string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^(e[0-9]+) ` + re).FindStringSubmatch(obs)
		if m == nil {
			t.Fatalf("no element %q in:\n%s", re, obs)
		}
		return m[1]
	}

	a, b := open(), open()
	if a.NodeId != worker.ID() || !strings.HasPrefix(a.Id, "bs-") {
		t.Fatalf("session %+v, want one on %s", a, worker.ID())
	}
	// Call 1, through the first node: load the form and look at it.
	r := do(via[0], a.Id, fmt.Sprintf(`{"action":"navigate","url":%q}`, site.URL+"/"), `{"action":"observe"}`)
	obs := r.Observations[0]
	// Call 2, through the second node: fill it in by refs, look again.
	r = do(via[1], a.Id, fmt.Sprintf(`{"action":"type","ref":%q,"text":"ada"}`, ref(obs, `input\[text\] "user"`)),
		fmt.Sprintf(`{"action":"type","ref":%q,"text":"hunter2"}`, ref(obs, `input\[password\]`)), `{"action":"observe"}`)
	if !strings.Contains(r.Observations[0], `= "ada"`) {
		t.Fatalf("the typed user name is not on the page:\n%s", r.Observations[0])
	}
	// Call 3, through the worker itself: submit and read the greeting.
	r = do(via[2], a.Id, fmt.Sprintf(`{"action":"click","ref":%q}`, ref(obs, `button "Go"`)), `{"action":"wait_for","selector":"#welcome"}`,
		`{"action":"extract","selector":"#welcome","name":"greeting"}`, `{"action":"observe"}`)
	var vals map[string]string
	if json.Unmarshal(r.Values, &vals); vals["greeting"] != "Welcome, ada!" {
		t.Fatalf("after login: %s\n%s", r.Values, strings.Join(r.Observations, "\n"))
	}
	me := func(id string) string {
		r := do(via[1], id, fmt.Sprintf(`{"action":"navigate","url":%q}`, site.URL+"/me"), `{"action":"extract","selector":"#me","name":"me"}`)
		var v map[string]string
		json.Unmarshal(r.Values, &v)
		return v["me"]
	}
	if got, other := me(a.Id), me(b.Id); got != "ada" || other != "nobody" {
		t.Fatalf("session a is %q (want ada), session b is %q (want nobody: no cookies of a's)", got, other)
	}
	shot, err := via[1].Browser.Screenshot(ctx, connect.NewRequest(&palyrav1.BrowserSessionRef{Id: a.Id}))
	if err != nil || len(shot.Msg.Data) == 0 || len(shot.Msg.Data) > browser.MaxSessionScreenshot {
		t.Fatalf("screenshot: %v", err)
	}
	list, err := via[1].Browser.ListSessions(ctx, connect.NewRequest(&palyrav1.ListBrowserSessionsRequest{}))
	if err != nil || len(list.Msg.Sessions) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := via[2].Browser.CloseSession(ctx, connect.NewRequest(&palyrav1.BrowserSessionRef{Id: a.Id})); err != nil {
		t.Fatal(op.Explain(err))
	}
	if _, err := via[0].Browser.Do(ctx, connect.NewRequest(&palyrav1.BrowserDoRequest{Id: a.Id, Steps: [][]byte{[]byte(`{"action":"observe"}`)}})); err == nil || op.Explain(err).Code != "not_found" {
		t.Fatalf("a closed session: %v", err)
	}

	// b is left alone past its idle TTL (8s here): it is gone. Listing
	// does not use a session, so it does not keep it alive.
	waitFor(t, "the idle session to expire", time.Minute, func() bool {
		l, err := via[0].Browser.ListSessions(ctx, connect.NewRequest(&palyrav1.ListBrowserSessionsRequest{}))
		return err == nil && len(l.Msg.Sessions) == 0
	})
	if _, err := via[0].Browser.Do(ctx, connect.NewRequest(&palyrav1.BrowserDoRequest{Id: b.Id, Steps: [][]byte{[]byte(`{"action":"observe"}`)}})); err == nil || op.Explain(err).Code != "not_found" {
		t.Fatalf("an expired session: %v", err)
	}
}

// BenchmarkBrowserSessionStep is one step per call (extract a heading) in
// a session on another node's worker: API, relay and the step itself.
func BenchmarkBrowserSessionStep(b *testing.B) {
	if _, ok := browser.Detect(); !ok {
		b.Skip("no Chromium")
	}
	first := start(b, node.Config{})
	op := operator(b, first, first.Addr())
	worker := joinWith(b, op, first.Addr(), node.Config{BrowserSlots: 1})
	ctx := context.Background()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>b</title><h1>Bench</h1><button>Go</button>`)
	}))
	defer site.Close()
	var sess *palyrav1.BrowserSession
	deadline := time.Now().Add(time.Minute)
	for sess == nil {
		r, err := op.Browser.OpenSession(ctx, connect.NewRequest(&palyrav1.OpenBrowserSessionRequest{AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true, NodeId: worker.ID()}))
		if err == nil {
			sess = r.Msg.Session
		} else if time.Now().After(deadline) {
			b.Fatal(op.Explain(err))
		} else {
			time.Sleep(200 * time.Millisecond)
		}
	}
	step := func(s string) {
		if _, err := op.Browser.Do(ctx, connect.NewRequest(&palyrav1.BrowserDoRequest{Id: sess.Id, Steps: [][]byte{[]byte(s)}})); err != nil {
			b.Fatal(op.Explain(err))
		}
	}
	step(fmt.Sprintf(`{"action":"navigate","url":%q}`, site.URL+"/"))
	var lat []time.Duration
	calls := 0
	for b.Loop() {
		if calls%200 == 199 { // a session allows 256 actions
			op.Browser.CloseSession(ctx, connect.NewRequest(&palyrav1.BrowserSessionRef{Id: sess.Id}))
			r, err := op.Browser.OpenSession(ctx, connect.NewRequest(&palyrav1.OpenBrowserSessionRequest{AllowHosts: []string{"127.0.0.1"}, AllowPrivate: true, NodeId: worker.ID()}))
			if err != nil {
				b.Fatal(op.Explain(err))
			}
			sess = r.Msg.Session
			step(fmt.Sprintf(`{"action":"navigate","url":%q}`, site.URL+"/"))
		}
		calls++
		t0 := time.Now()
		step(`{"action":"extract","selector":"h1","name":"h"}`)
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "step-p50-ms")
	b.ReportMetric(pct(0.99), "step-p99-ms")
}
