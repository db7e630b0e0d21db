package browser

import (
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/palyra-mesh/palyra/runtime"
)

// barrierSite lets two jobs meet: /signal?n=X opens gate X, /wait?n=X
// blocks until it is open. It records the Cookie header of every request
// that carries ?job=B.
type barrierSite struct {
	*countingServer
	mu       sync.Mutex
	gates    map[string]chan struct{}
	bCookies []string
}

func newBarrierSite(t *testing.T) *barrierSite {
	s := &barrierSite{gates: map[string]chan struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { html(w, "<p>isolation</p>") })
	mux.HandleFunc("GET /signal", func(w http.ResponseWriter, r *http.Request) {
		close(s.gate(r.FormValue("n")))
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /wait", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.gate(r.FormValue("n")):
			_, _ = w.Write([]byte("ok"))
		case <-time.After(20 * time.Second):
			_, _ = w.Write([]byte("gave up"))
		}
	})
	s.countingServer = newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("job") == "B" {
			s.mu.Lock()
			s.bCookies = append(s.bCookies, r.Header.Get("Cookie"))
			s.mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	}))
	return s
}

func (s *barrierSite) gate(n string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.gates[n]
	if !ok {
		g = make(chan struct{})
		s.gates[n] = g
	}
	return g
}

// TestJobsDoNotShareState runs job A, which stores a cookie and a
// localStorage item, concurrently with job B on the same origin; B reads
// only after A has stored (a server-side barrier orders them, not sleeps),
// and A waits for B before it ends. B and a later job C must see nothing.
func TestJobsDoNotShareState(t *testing.T) {
	e := shared(t)
	site := newBarrierSite(t)
	read := `[document.cookie, localStorage.getItem("k")]`
	jobA := loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/?job=A"},
		map[string]any{"action": "evaluate", "name": "stored",
			"expression": `document.cookie = "sid=A; path=/; max-age=3600"; localStorage.setItem("k", "A"); fetch("/signal?n=a-stored").then(r => r.text())`},
		map[string]any{"action": "evaluate", "name": "waited", "expression": `fetch("/wait?n=b-read").then(r => r.text())`},
		map[string]any{"action": "evaluate", "name": "mine", "expression": read},
	))
	jobB := loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/?job=B"},
		map[string]any{"action": "evaluate", "name": "waited", "expression": `fetch("/wait?n=a-stored&job=B").then(r => r.text())`},
		map[string]any{"action": "evaluate", "name": "seen", "expression": read},
		map[string]any{"action": "evaluate", "name": "signal", "expression": `fetch("/signal?n=b-read&job=B").then(r => r.text())`},
	))
	var ra, rb runtime.Result
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ra = run(t, e, jobA) }()
	go func() { defer wg.Done(); rb = run(t, e, jobB) }()
	wg.Wait()
	mustOK(t, ra)
	mustOK(t, rb)
	va, vb := values(t, ra), values(t, rb)
	if va["waited"] != "ok" || vb["waited"] != "ok" {
		t.Fatalf("the jobs did not overlap (A waited %v, B waited %v)", va["waited"], vb["waited"])
	}
	if want := []any{"sid=A", "A"}; !reflect.DeepEqual(va["mine"], want) {
		t.Fatalf("job A reads back %v, want %v (its own state)", va["mine"], want)
	}
	if want := []any{"", nil}; !reflect.DeepEqual(vb["seen"], want) {
		t.Errorf("concurrent job B sees %v, want %v", vb["seen"], want)
	}
	site.mu.Lock()
	for _, c := range site.bCookies {
		if strings.Contains(c, "sid=A") {
			t.Errorf("job B sent A's cookie: %q", c)
		}
	}
	site.mu.Unlock()

	rc := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/?job=C"},
		map[string]any{"action": "evaluate", "name": "seen", "expression": read},
	)))
	mustOK(t, rc)
	if want := []any{"", nil}; !reflect.DeepEqual(values(t, rc)["seen"], want) {
		t.Errorf("later job C sees %v, want %v", values(t, rc)["seen"], want)
	}
}

// TestNoLeftoverTargets: after jobs end (also failed and canceled ones),
// their tabs and browser contexts are gone; only the browser's first tab
// stays.
func TestNoLeftoverTargets(t *testing.T) {
	e := newExecutor(t, Config{})
	site := alivePage(t)
	_ = run(t, e, loopbackSpec(script(t, map[string]any{"action": "navigate", "url": site + "/"})))
	_ = run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "click", "selector": "#missing", "timeout_ms": 100})))
	_ = run(t, e, runtime.Spec{Script: script(t, map[string]any{"action": "navigate", "url": site + "/"})})

	e.mu.Lock()
	p := e.lanes[0].br.cur
	e.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		infos, err := chromedp.Targets(p.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var pages []string
		pooled := e.pool.contexts() // made ahead for the next jobs, never used
		for _, in := range infos {
			if in.Type == "page" && !pooled[in.BrowserContextID] {
				pages = append(pages, in.URL+" "+string(in.BrowserContextID))
			}
		}
		if len(pages) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pages left after the jobs: %v, want only the first tab", pages)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
