package browser

import (
	"context"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
)

// waitPool waits until the executor holds n contexts made ahead.
func waitPool(t *testing.T, e *Executor, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.pool.len() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d contexts made ahead after 20s, want %d", e.pool.len(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPoolMakesContextsAheadAndUsesEachOnce: the executor keeps one ready
// context per slot; a job takes one (never one another job used) and a
// replacement is made.
func TestPoolMakesContextsAheadAndUsesEachOnce(t *testing.T) {
	e := newExecutor(t, Config{Slots: 2, Prewarm: true})
	waitPool(t, e, 2)
	before := e.pool.contexts()
	site := alivePage(t)
	seen := map[cdp.BrowserContextID]bool{}
	for i := 0; i < 4; i++ {
		mustOK(t, run(t, e, loopbackSpec(script(t, map[string]any{"action": "navigate", "url": site + "/"}))))
		waitPool(t, e, 2)
		for id := range e.pool.contexts() {
			if seen[id] {
				t.Fatalf("context %s is in the pool again after a job", id)
			}
		}
		for id := range before {
			if !e.pool.contexts()[id] {
				seen[id] = true // taken by this job: never back in the pool
			}
		}
		before = e.pool.contexts()
	}
	if len(seen) != 4 {
		t.Fatalf("4 jobs took %d distinct pooled contexts, want 4", len(seen))
	}
}

// TestPoolRefillsAfterTheJobNotDuringIt: the replacement for a context a
// job took is made once the job's result is out, not while the job runs
// (its ~45 ms of browser work would compete with the job's own steps).
func TestPoolRefillsAfterTheJobNotDuringIt(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1, Prewarm: true})
	waitPool(t, e, 1)
	site := alivePage(t)
	during := -1
	e.hooks.stepStarted = func(i int) {
		if i == 1 {
			// Long enough for the filler to have made a context had it
			// been asked when the job took its own (~45 ms idle).
			time.Sleep(500 * time.Millisecond)
			during = e.pool.len()
		}
	}
	mustOK(t, run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "extract", "selector": "p", "name": "p"},
	))))
	e.hooks.stepStarted = nil
	if during != 0 {
		t.Fatalf("the pool held %d contexts while the job that took its only one ran, want 0 (refilled during the job)", during)
	}
	waitPool(t, e, 1) // and refilled after it
}

// TestPooledContextAdmitsNothingBeforeAJobTakesIt: a context waiting in the
// pool has a proxy that refuses every request and interception that fails
// every request, so a page there cannot reach anything.
func TestPooledContextAdmitsNothingBeforeAJobTakesIt(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1, Prewarm: true})
	waitPool(t, e, 1)
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { html(w, "<p>reached</p>") }))
	r := e.pool.pop()
	defer r.close()

	// Straight through the proxy.
	pu, _ := url.Parse(r.proxy.URL())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 5 * time.Second}
	if resp, err := c.Get(srv.URL + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("the pooled proxy served a request: %s", resp.Status)
		}
	}
	// From the page itself.
	ctx, cancel := context.WithTimeout(r.tab, 5*time.Second)
	defer cancel()
	if _, err := cdp.Call(ctx, r.t, page.Navigate, page.NavigateParams{URL: srv.URL + "/"}); err != nil {
		t.Logf("navigate: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := srv.requests.Load(); n != 0 {
		t.Fatalf("the server saw %d requests from a context no job owns, want 0", n)
	}
}

// TestDeadPooledContextIsNotHandedOut: a pooled page whose renderer died
// is replaced, not given to the next job.
func TestDeadPooledContextIsNotHandedOut(t *testing.T) {
	e := newExecutor(t, Config{Slots: 2, Prewarm: true})
	waitPool(t, e, 2)
	for _, l := range e.lanes {
		e.mu.Lock()
		p := l.br.cur
		e.mu.Unlock()
		for _, pid := range descendants(p.pid, "--type=renderer") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	site := alivePage(t)
	for i := 0; i < 3; i++ {
		mustOK(t, run(t, e, loopbackSpec(script(t,
			map[string]any{"action": "navigate", "url": site + "/"},
			map[string]any{"action": "extract", "selector": "p", "name": "p"},
		))))
	}
}
