package browser

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// A ready context is a browser context set up before the job that will use
// it arrives: its own egress proxy, an incognito browser context routed
// through it with downloads denied, and a tab with request interception on.
// Setting these up is most of a short job's time (DESIGN.md, "Where a warm
// screenshot job's time goes"), so the executor keeps one per slot made
// ahead, off the job's path.
//
// Isolation is unchanged: a ready context is used by one job (or session)
// only and disposed of after it, exactly as one made on demand. Until a job
// takes it, its proxy admits nothing and its interception fails every
// request, and nothing has loaded in it but about:blank.
type ready struct {
	p     *proc
	proxy *egressProxy
	bc    cdp.BrowserContextID
	log   *slog.Logger
	// noFetch turns request interception off (a test hook, Config.layers).
	noFetch bool

	mu        sync.Mutex         // guards tab, t, cancelTab (replaceTab swaps them)
	tab       context.Context    // the tab; lives until close or replaceTab
	t         *chromedp.Target   // the tab's target
	cancelTab context.CancelFunc // detaches from the tab

	owner atomic.Pointer[job] // the job that took it; nil while pooled
	dead  atomic.Bool         // its page crashed while pooled

	closeOnce sync.Once
	wg        sync.WaitGroup // the event goroutines
}

// denyAll is the policy of a proxy that no job has taken yet.
var denyAll = &policy{cache: map[string]*lookup{}}

// prepare sets up a ready context on browser p. ctx bounds only the set-up.
func (e *Executor) prepare(ctx context.Context, p *proc, log *slog.Logger) (r *ready, err error) {
	noProxy, noFetch := e.cfg.layers.noProxy, e.cfg.layers.noFetch
	r = &ready{p: p, log: log, noFetch: noFetch}
	defer func() {
		if err != nil {
			r.close()
			r = nil
		}
	}()
	if !noProxy {
		if r.proxy, err = startProxy(denyAll, newRecorder(0, 0, 0), log); err != nil {
			return r, err
		}
	}
	// "<-loopback>" removes Chromium's implicit bypass of localhost so
	// loopback traffic is also policed.
	params := target.CreateBrowserContextParams{}
	if r.proxy != nil {
		params = target.CreateBrowserContextParams{ProxyServer: r.proxy.URL(), ProxyBypassList: "<-loopback>"}
	}
	bc, err := cdp.Call(ctx, p.b, target.CreateBrowserContext, params)
	if err != nil {
		return r, fmt.Errorf("creating a browser context: %w", err)
	}
	r.bc = bc.BrowserContextID
	if _, err := cdp.Call(ctx, p.b, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior:         browser.SetDownloadBehaviorBehaviorDeny,
		BrowserContextID: r.bc,
	}); err != nil {
		return r, fmt.Errorf("disabling downloads: %w", err)
	}
	// The tab outlasts the set-up, waiting in the pool.
	if r.tab, r.t, r.cancelTab, err = r.openTab(ctx); err != nil {
		return r, err
	}
	return r, nil
}

// openTab opens a tab in r's browser context, with request interception
// on before it loads anything, and starts the goroutines that handle its
// events: intercepted requests, a crash of its renderer, JavaScript
// dialogs. The tab lives with the browser, not with ctx, which bounds only
// the set-up; it ends when the returned cancel is called (which detaches
// from it) or the browser context is disposed of.
func (r *ready) openTab(ctx context.Context) (tab context.Context, t *chromedp.Target, cancelTab context.CancelFunc, err error) {
	p, noFetch := r.p, r.noFetch
	// On a lane's browser the tab is made here, with its frames drawn on
	// demand (lane.go).
	if p.frames {
		yes := true
		ct, err := cdp.Call(ctx, p.b, target.CreateTarget, target.CreateTargetParams{
			URL: "about:blank", BrowserContextID: r.bc, EnableBeginFrameControl: &yes,
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("opening a tab: %w", err)
		}
		tab, cancelTab = chromedp.NewContext(p.ctx, chromedp.WithTargetID(ct.TargetID), chromedp.WithDetachOnCancel())
	} else {
		tab, cancelTab = chromedp.NewContext(p.ctx, chromedp.WithExistingBrowserContext(r.bc), chromedp.WithDetachOnCancel())
	}
	// Events opens the target and subscribes before any request can be
	// made; the set-up calls are bounded by ctx.
	setupDone := context.AfterFunc(ctx, cancelTab)
	paused := chromedp.Events(tab, fetch.RequestPaused)
	crashed := chromedp.Events(tab, inspector.TargetCrashed)
	dialogs := chromedp.Events(tab, page.JavascriptDialogOpening)
	err = chromedp.Do(tab, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, inspector.Enable, cdp.Empty{}); err != nil {
			return err
		}
		if noFetch {
			return nil
		}
		_, err := cdp.Call(ctx, t, fetch.Enable, fetch.EnableParams{
			Patterns: []*fetch.RequestPattern{{URLPattern: "*"}},
		})
		return err
	}))
	if !setupDone() || err != nil {
		cancelTab()
		if err == nil {
			err = ctx.Err()
		}
		return nil, nil, nil, fmt.Errorf("opening the page: %w", err)
	}
	t = chromedp.FromContext(tab).Target
	mainFrame := cdp.FrameID(t.TargetID)

	r.wg.Add(3)
	go func() {
		defer r.wg.Done()
		for _, err := range crashed {
			if err != nil || tab.Err() != nil { // a tab closed is no one's concern
				return
			}
			if cur, _ := r.current(); cur != nil && cur != tab {
				continue // a tab replaced (or not yet in place: replaceTab)
			}
			if j := r.owner.Load(); j != nil {
				j.pageCrashed()
			} else {
				r.dead.Store(true)
			}
		}
	}()
	go func() {
		defer r.wg.Done()
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			r.answerDialog(tab, t, ev)
		}
	}()
	go func() {
		defer r.wg.Done()
		sem := make(chan struct{}, maxPausedInFlight)
		var wg sync.WaitGroup
		defer wg.Wait()
		for ev, err := range paused {
			if err != nil {
				return
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if j := r.owner.Load(); j != nil {
					j.decide(tab, t, mainFrame, ev)
					return
				}
				// Nothing may load before a job owns the context.
				_, _ = cdp.Call(tab, t, fetch.FailRequest, fetch.FailRequestParams{
					RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient,
				})
			}()
		}
	}()
	return tab, t, cancelTab, nil
}

// answerDialog answers a JavaScript dialog of tab t at once, so that no
// dialog stalls the page (an open alert holds back the page's scripts, its
// load event and every later step until it is answered): an alert is
// accepted, a confirm or prompt dismissed (false, null), and a
// beforeunload accepted, so the navigation that raised it proceeds. The
// owning job records it, for its Stderr or the session's notes.
func (r *ready) answerDialog(tab context.Context, t *chromedp.Target, ev page.EventJavascriptDialogOpening) {
	accept := ev.Type == page.DialogTypeAlert || ev.Type == page.DialogTypeBeforeunload
	if j := r.owner.Load(); j != nil {
		j.rec.dialog(string(ev.Type), ev.Message, ev.URL, accept)
	}
	ctx, cancel := context.WithTimeout(tab, cleanupTimeout)
	defer cancel()
	if _, err := cdp.Call(ctx, t, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept}); err != nil && tab.Err() == nil {
		r.log.Debug("answering a JavaScript dialog", "type", ev.Type, "err", err)
	}
}

// usable reports whether r can still be handed to a job on browser p.
func (r *ready) usable(p *proc) bool {
	tab, _ := r.current()
	return r.p == p && p.usable() && !r.dead.Load() && tab.Err() == nil
}

// current returns r's tab and its target.
func (r *ready) current() (context.Context, *chromedp.Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tab, r.t
}

// bind hands r to j: its proxy enforces j's policy and reports to j's
// recorder, interception decides by j's policy. It returns the context
// j's steps derive from: the tab, ended (with jctx's cause) when jctx ends.
func (r *ready) bind(j *job, jctx context.Context) context.Context {
	if r.proxy != nil {
		r.proxy.bind(j.pol, j.rec)
	}
	r.owner.Store(j)
	j.ready = r
	j.onCleanup(r.close)
	return r.follow(j, jctx)
}

// follow returns the context j's steps derive from: r's current tab,
// ended (with jctx's cause) when jctx ends or the tab does. On a lane its
// frames are drawn while it lasts.
func (r *ready) follow(j *job, jctx context.Context) context.Context {
	base, t := r.current()
	tab, cancel := context.WithCancelCause(base)
	stop := context.AfterFunc(jctx, func() { cancel(context.Cause(jctx)) })
	j.onCleanup(func() { stop(); cancel(nil) })
	if r.p.frames {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.p.pump(tab, t) }()
	}
	return tab
}

// replaceTab gives j (r's owner) a fresh tab in r's browser context, for
// a page that cannot be saved (its script does not stop), and closes the
// old tab, which ends its renderer process unless another tab shares it.
// The browser context, and so the cookies, storage and cache, stay. It
// returns the context j's steps derive from, as bind does; ctx bounds the
// set-up. Only the goroutine that drives j may call it.
func (r *ready) replaceTab(ctx context.Context, j *job, jctx context.Context) (context.Context, error) {
	tab, t, cancelTab, err := r.openTab(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	oldT, oldCancel := r.t, r.cancelTab
	r.tab, r.t, r.cancelTab = tab, t, cancelTab
	r.mu.Unlock()
	// Close the old tab, then detach from it: a request it had paused
	// for a decision is let through if its session detaches first. Its
	// crash watcher ignores it from now on (it is no longer r's tab).
	// Chromium does not wait long for a renderer that does not answer
	// (the whole replacement takes ~0.1 s with the old page spinning),
	// and the renderer process, serving no other page, exits.
	cctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	if _, err := cdp.Call(cctx, r.p.b, target.CloseTarget, target.CloseTargetParams{TargetID: oldT.TargetID}); err != nil {
		r.log.Debug("closing a replaced tab", "err", err)
	}
	oldCancel()
	return r.follow(j, jctx), nil
}

// close disposes of the browser context (its tabs, cookies, storage),
// detaches from the tab and stops the proxy. It is safe to call more than
// once. The context goes first: a request paused by interception and not
// yet refused when its session detaches is let through, and with the
// proxy layer off nothing else would stop it.
func (r *ready) close() {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		cancelTab := r.cancelTab
		r.mu.Unlock()
		if r.bc != "" && !r.p.lost() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			_, _ = cdp.Call(ctx, r.p.b, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: r.bc})
			cancel()
		}
		if cancelTab != nil {
			cancelTab()
		}
		r.wg.Wait()
		if r.proxy != nil {
			r.proxy.Close()
		}
	})
}

// readyPool holds the contexts made ahead of jobs, at most one per lane,
// each on its lane's browser.
type readyPool struct {
	mu    sync.Mutex
	items map[*lane]*ready
}

// take removes and returns l's context, or nil.
func (rp *readyPool) take(l *lane) *ready {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	r := rp.items[l]
	delete(rp.items, l)
	return r
}

// put makes r l's context; it reports false, keeping the one there, if l
// has one already.
func (rp *readyPool) put(l *lane, r *ready) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.items[l] != nil {
		return false
	}
	if rp.items == nil {
		rp.items = map[*lane]*ready{}
	}
	rp.items[l] = r
	return true
}

func (rp *readyPool) has(l *lane) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.items[l] != nil
}

// pop removes and returns any context, or nil.
func (rp *readyPool) pop() *ready {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for l, r := range rp.items {
		delete(rp.items, l)
		return r
	}
	return nil
}

func (rp *readyPool) len() int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return len(rp.items)
}

// contexts lists the pooled browser contexts; for tests.
func (rp *readyPool) contexts() map[cdp.BrowserContextID]bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	m := map[cdp.BrowserContextID]bool{}
	for _, r := range rp.items {
		m[r.bc] = true
	}
	return m
}

// probeTimeout bounds the check that a pooled page still answers. A live
// renderer answers in well under a millisecond; one that died while pooled
// never does (its crash event may not have arrived yet), and the job then
// gets a context made on demand instead.
const probeTimeout = 100 * time.Millisecond

// alive asks r's page for a trivial evaluation.
func (r *ready) alive() bool {
	tab, t := r.current()
	ctx, cancel := context.WithTimeout(tab, probeTimeout)
	defer cancel()
	_, err := cdp.Call(ctx, t, cdpruntime.Evaluate, cdpruntime.EvaluateParams{Expression: "1"})
	return err == nil && !r.dead.Load()
}

// takeReady returns lane l's pooled context if it is on browser p and its
// page answers, or nil; one left from an earlier browser, or whose page
// died, is closed on the way. The job asks the filler for a replacement
// (kickFiller) once its result is out, so the replacement's set-up (~45 ms
// of browser work) does not compete with the job for the CPU.
func (e *Executor) takeReady(l *lane, p *proc) *ready {
	r := e.pool.take(l)
	if r == nil {
		return nil
	}
	if r.usable(p) && r.alive() {
		return r
	}
	e.runs.Add(1)
	go func() { defer e.runs.Done(); r.close() }()
	return nil
}

func (e *Executor) kickFiller() {
	if !e.cfg.Prewarm {
		return
	}
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// fill keeps one ready context per lane while the executor lives,
// starting a lane's browser if it has none. It works one context at a
// time, in the background; a job that finds its lane's context missing
// makes its own, as it would without the pool.
func (e *Executor) fill() {
	defer e.runs.Done()
	for {
		select {
		case <-e.life.Done():
			e.drainPool()
			return
		case <-e.kick:
		}
		for _, l := range e.lanes {
			if e.life.Err() != nil {
				break
			}
			if e.pool.has(l) {
				continue
			}
			p, err := e.browser(e.life, &l.br)
			if err != nil {
				break // the next job retries the start and kicks again
			}
			ctx, cancel := context.WithTimeout(e.life, e.cfg.StepTimeout)
			r, err := e.prepare(ctx, p, e.log)
			cancel()
			if err != nil {
				e.log.Debug("preparing a browser context ahead of a job", "lane", l.idx, "err", err)
				break
			}
			if !e.pool.put(l, r) {
				r.close()
			}
		}
	}
}

// drainPool closes every pooled context.
func (e *Executor) drainPool() {
	for r := e.pool.pop(); r != nil; r = e.pool.pop() {
		r.close()
	}
}
