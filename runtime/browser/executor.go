package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
)

// Executor runs browser jobs on long-lived Chromiums, one per slot, each
// job in a fresh incognito browser context; interactive sessions share one
// more browser. It is safe for concurrent use.
type Executor struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{} // one token per free lane
	res   resolver

	// life is cancelled by Close; runs derive from it.
	life     context.Context
	shutdown context.CancelCauseFunc

	mu     sync.Mutex // guards every browser's cur, gen, busy, closed
	lanes  []*lane    // one per slot, each with its own browser (lane.go)
	sess   browserRef // the browser of interactive sessions, started by the first
	gen    int
	closed bool
	runs   sync.WaitGroup

	hooks testHooks

	sessMu   sync.Mutex
	sessions map[string]*session // nil value: reserved while opening
	ended    endedSessions       // the sessions that ended lately, to say so

	pool readyPool     // contexts made ahead of jobs, one per slot (pool.go)
	kick chan struct{} // asks the filler to top the pool up
}

// testHooks lets tests in this package observe a job mid-flight.
type testHooks struct {
	stepStarted func(step int) // called as each step (of a job or a session call) starts
	// beforeDecide is called with each intercepted request's URL before
	// the job's policy is applied to it; tab ends when the tab is let go.
	beforeDecide func(tab context.Context, url string)
}

// layers turns one enforcement layer off, so tests can show that each
// layer alone refuses what it should (Config.layers; fixed at New).
type layers struct {
	noFetch, noProxy bool
}

var _ runtime.Executor = (*Executor)(nil)

// errExecutorClosed is the cause given to runs stopped by Close.
var errExecutorClosed = errors.New("browser executor closed")

// New starts an Executor and its browser. ctx bounds only the start. It
// fails when no Chromium is found (see Detect and InstallHint) or the
// browser does not start.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	cfg = cfg.withDefaults()
	if cfg.ExecPath == "" {
		p, ok := Detect()
		if !ok {
			return nil, fmt.Errorf("browser: no Chromium found; %s", InstallHint)
		}
		cfg.ExecPath = p
	}
	if err := clearProfiles(cfg.ProfileDir); err != nil {
		return nil, err
	}
	life, shutdown := context.WithCancelCause(context.Background())
	e := &Executor{
		cfg:      cfg,
		sess:     browserRef{name: "sessions"},
		log:      cfg.Logger.With("executor", runtime.KindBrowser),
		slots:    make(chan struct{}, cfg.Slots),
		res:      defaultResolver,
		life:     life,
		shutdown: shutdown,
		sessions: map[string]*session{},
		kick:     make(chan struct{}, 1),
	}
	for i := range cfg.Slots {
		e.lanes = append(e.lanes, &lane{idx: i, br: browserRef{name: fmt.Sprintf("lane %d", i), frames: true}})
	}
	// Start the first lane's browser now, so a Chromium that cannot run
	// fails New. The other lanes' browsers start with their first job, or
	// now in the background with Prewarm (the filler), so a worker that
	// runs one browser job at a time holds one browser.
	if _, err := e.browser(ctx, &e.lanes[0].br); err != nil {
		shutdown(err)
		return nil, err
	}
	go e.reapSessions()
	if cfg.Prewarm {
		e.runs.Add(1)
		go e.fill()
		e.kickFiller()
	}
	return e, nil
}

// Kind reports runtime.KindBrowser.
func (e *Executor) Kind() runtime.Kind { return runtime.KindBrowser }

// Run executes spec.Script. See the package documentation for the script
// format and what the Result holds. Spec.Timeout (default
// Config.DefaultTimeout) counts from when the job has a slot and a browser;
// waiting for them is bounded by ctx only. It never panics on hostile input.
func (e *Executor) Run(ctx context.Context, spec runtime.Spec) (res runtime.Result) {
	start := time.Now()
	defer func() { res.Duration = time.Since(start) }()

	script, err := ParseScript(spec.Script)
	if err != nil {
		return failed(runtime.ReasonStepFailed, err.Error())
	}
	pol, err := newPolicy(spec.AllowHosts, spec.AllowPrivate, e.res)
	if err != nil {
		return failed(runtime.ReasonStepFailed, "invalid job: "+err.Error())
	}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return failed(runtime.ReasonCanceled, errExecutorClosed.Error())
	}
	e.runs.Add(1)
	e.mu.Unlock()
	defer e.runs.Done()

	if spec.Queued != nil {
		spec.Queued()
	}
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return failed(runtime.ReasonCanceled, "canceled while waiting for a browser slot: "+context.Cause(ctx).Error())
	case <-e.life.Done():
		return failed(runtime.ReasonCanceled, errExecutorClosed.Error())
	}

	l := e.takeLane()
	release := sync.OnceFunc(func() { e.freeLane(l); <-e.slots })
	p, err := e.browser(ctx, &l.br)
	if err != nil {
		release()
		if ctx.Err() != nil {
			return failed(runtime.ReasonCanceled, err.Error())
		}
		return failed(runtime.ReasonInternal, err.Error())
	}

	ranFrom := time.Now()
	defer func() { res.Ran = time.Since(ranFrom) }()
	if spec.Tap != nil && !spec.Tap.Start() {
		release()
		return failed(runtime.ReasonCanceled, "withdrawn while it waited for a slot")
	}

	// The job's timeout bounds the whole run; the script's timeout_ms is
	// only each step's default (job.stepTimeout).
	timeout, timeoutBy := spec.Timeout, "the job's --timeout"
	if timeout <= 0 {
		timeout, timeoutBy = e.cfg.DefaultTimeout, "the worker's default job timeout"
	}
	maxOutput := spec.MaxOutput
	if maxOutput <= 0 {
		maxOutput = e.cfg.DefaultMaxOutput
	}
	j := &job{
		e: e, p: p, lane: l, script: script, pol: pol, timeout: timeout, timeoutBy: timeoutBy,
		rec: newRecorder(maxOutput, e.cfg.MaxArtifactBytes, e.cfg.MaxArtifactsTotal),
		log: e.log.With("browser_gen", p.gen), release: release,
	}
	res = j.run(ctx)
	if !p.usable() { // died or hung; a crashed renderer alone keeps the browser
		e.discard(&l.br, p)
	}
	return res
}

// browser returns ref's running browser, starting a fresh one when there
// is none or the last one died or hung.
func (e *Executor) browser(ctx context.Context, ref *browserRef) (*proc, error) {
	e.mu.Lock()
	if p := ref.cur; p != nil && p.usable() {
		e.mu.Unlock()
		return p, nil
	}
	e.mu.Unlock()

	ref.startMu.Lock()
	defer ref.startMu.Unlock()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errExecutorClosed
	}
	old := ref.cur
	if old != nil && old.usable() { // another run restarted it meanwhile
		e.mu.Unlock()
		return old, nil
	}
	e.gen++
	gen := e.gen
	e.mu.Unlock()

	if old != nil {
		e.log.Warn("restarting the browser", "browser", ref.name, "old_gen", old.gen, "old_pid", old.pid)
		old.kill()
	}
	p, err := launch(ctx, e.cfg, gen, ref.frames, e.log)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		p.kill()
		return nil, errExecutorClosed
	}
	ref.cur = p
	return p, nil
}

// discard retires p so the next job on ref starts a fresh browser.
func (e *Executor) discard(ref *browserRef, p *proc) {
	p.broken.Store(true)
	e.mu.Lock()
	if ref.cur == p {
		ref.cur = nil
	}
	e.mu.Unlock()
	p.kill()
}

// browserPID is the process ID of the first lane's browser, the one a
// lone job runs on (0 if none); for tests.
func (e *Executor) browserPID() int { return e.browserPIDs()[0] }

// browserPIDs lists the lanes' browser process IDs (0 for a lane with
// none); for tests.
func (e *Executor) browserPIDs() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	pids := make([]int, len(e.lanes))
	for i, l := range e.lanes {
		if l.br.cur != nil {
			pids[i] = l.br.cur.pid
		}
	}
	return pids
}

// Close stops running jobs (they end with ReasonCanceled) and the browser.
// It waits for runs to return until ctx ends.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.shutdown(errExecutorClosed)

	done := make(chan struct{})
	go func() { e.runs.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("browser: closing: runs still active: %w", ctx.Err())
	}

	refs := []*browserRef{&e.sess}
	for _, l := range e.lanes {
		refs = append(refs, &l.br)
	}
	for _, ref := range refs {
		ref.startMu.Lock()
		e.mu.Lock()
		p := ref.cur
		ref.cur = nil
		e.mu.Unlock()
		ref.startMu.Unlock()
		if p != nil {
			if cerr := p.close(ctx); cerr != nil && err == nil {
				err = fmt.Errorf("browser: closing the browser of %s: %w", ref.name, cerr)
			}
		}
	}
	return err
}

func failed(r runtime.Reason, msg string) runtime.Result {
	return runtime.Result{Reason: r, Message: oneLine(msg), Stdout: []byte("{}")}
}
