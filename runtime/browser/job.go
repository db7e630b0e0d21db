package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/palyra-mesh/palyra/runtime"
)

// cleanupTimeout bounds disposing of a job's browser context.
const cleanupTimeout = 5 * time.Second

// maxPausedInFlight bounds concurrent policy decisions per job (each may
// wait on DNS).
const maxPausedInFlight = 16

// Causes that end a job's or a step's context.
var (
	errJobTimeout     = errors.New("job timeout")
	errStepTimeout    = errors.New("step timeout")
	errCallerCanceled = errors.New("job canceled by the caller")
	errPageCrashed    = errors.New("page crashed (its renderer process died)")
	errNavBlocked     = errors.New("navigation blocked")
	errUnreachable    = errors.New("page unreachable")
)

// stepTimeoutError is the cause that ends a step whose timeout ran out:
// d, set by the setting by names (a step's or the script's timeout_ms, a
// default).
type stepTimeoutError struct {
	d  time.Duration
	by string
}

func (e *stepTimeoutError) Error() string {
	return fmt.Sprintf("%v of %s (set by %s) ran out", errStepTimeout, e.d, e.by)
}
func (e *stepTimeoutError) Unwrap() error { return errStepTimeout }

// job is one Run: its browser context, tab, policy, proxy and output.
type job struct {
	e       *Executor
	p       *proc
	lane    *lane  // nil for a session
	ready   *ready // its browser context and tab, once open
	script  *Script
	pol     *policy
	rec     *recorder
	timeout time.Duration
	// timeoutBy names the setting timeout came from, for the error of a
	// job that runs out of it.
	timeoutBy string
	log       *slog.Logger

	mu        sync.Mutex
	abortStep context.CancelCauseFunc // cancels the running step, if any
	crashed   bool

	cleanups []func() // run by cleanup, last first; only the Run goroutine touches it
	release  func()   // frees the job's slot, after its cleanup
}

// run executes the script and builds the Result.
func (j *job) run(ctx context.Context) runtime.Result {
	base, cancelBase := context.WithCancelCause(j.p.ctx)
	defer cancelBase(nil)
	stopCaller := context.AfterFunc(ctx, func() { cancelBase(errCallerCanceled) })
	defer stopCaller()
	stopLife := context.AfterFunc(j.e.life, func() { cancelBase(errExecutorClosed) })
	defer stopLife()
	jctx, cancelJob := context.WithTimeoutCause(base, j.timeout, errJobTimeout)
	defer cancelJob()

	res := j.runSteps(jctx)
	res.Stdout = j.rec.stdout()
	res.Stderr = j.rec.stderr()
	res.Artifacts = j.rec.takeArtifacts()
	// Return now and dispose of the browser context in the background
	// (it waits on the browser, bounded by cleanupTimeout per call): the
	// result does not wait for it, but the job's slot does (release), so
	// cleanups never pile up past the slots. Close waits for them.
	j.e.runs.Add(1)
	go func() {
		defer j.e.runs.Done()
		j.e.kickFiller() // the context this job took, replaced after its result
		j.cleanup()
		if j.release != nil {
			j.release()
		}
	}()
	return res
}

// onCleanup registers f to run at cleanup, in reverse order.
func (j *job) onCleanup(f func()) { j.cleanups = append(j.cleanups, f) }

// cleanup closes the tab, disposes of the browser context and stops the
// proxy.
func (j *job) cleanup() {
	for i := len(j.cleanups) - 1; i >= 0; i-- {
		j.cleanups[i]()
	}
	j.cleanups = nil
}

// runSteps sets up the browser context and runs each step in order.
func (j *job) runSteps(jctx context.Context) runtime.Result {
	tab, err := j.open(jctx)
	if err != nil {
		return j.result(jctx, -1, "", err)
	}
	for i, st := range j.script.Steps {
		if err := j.step(tab, i, st); err != nil {
			return j.result(jctx, i, st.Action, err)
		}
	}
	return runtime.Result{}
}

// open gives the job its isolated browser context (its own cookies,
// storage, cache, egress proxy, no downloads) and tab, with request
// interception on before the page loads anything: one made ahead (pool.go)
// when there is one, else one made now. Cleanup disposes of it.
func (j *job) open(jctx context.Context) (context.Context, error) {
	j.rec.onNavBlocked = func(*BlockedError) { j.abort(errNavBlocked) }
	var r *ready
	if j.lane != nil {
		r = j.e.takeReady(j.lane, j.p)
	}
	if r == nil {
		var err error
		if r, err = j.e.prepare(jctx, j.p, j.log); err != nil {
			return nil, err
		}
	}
	return r.bind(j, jctx), nil
}

// pageCrashed records that the job's renderer died and stops its step.
func (j *job) pageCrashed() {
	j.mu.Lock()
	j.crashed = true
	j.mu.Unlock()
	j.abort(errPageCrashed)
}

// pageHasCrashed reports whether the job's page crashed (and was not
// replaced since).
func (j *job) pageHasCrashed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.crashed
}

// clearCrashed records that the crashed page was replaced.
func (j *job) clearCrashed() {
	j.mu.Lock()
	j.crashed = false
	j.mu.Unlock()
}

// decide applies the job's policy to one intercepted request.
func (j *job) decide(ctx context.Context, t *chromedp.Target, mainFrame cdp.FrameID, ev fetch.EventRequestPaused) {
	if ev.Request == nil {
		return
	}
	u := ev.Request.URL + ev.Request.URLFragment
	if h := j.e.hooks.beforeDecide; h != nil {
		h(ctx, u)
	}
	err := j.pol.checkURL(ctx, u)
	if err == nil {
		if _, err := cdp.Call(ctx, t, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID}); err != nil && ctx.Err() == nil {
			j.log.Debug("continuing a request", "url", truncate(u, 256), "err", err)
		}
		return
	}
	var be *BlockedError
	if !errors.As(err, &be) {
		be = &BlockedError{URL: u, Reason: err.Error()}
	}
	j.rec.blocked(u, string(ev.ResourceType), be.Reason, "fetch")
	nav := ev.ResourceType == network.ResourceTypeDocument && ev.FrameID == mainFrame
	if nav {
		// Recorded first, so a step that sees the load fail finds why.
		j.rec.noteNavBlocked(be)
	}
	// The step is aborted only once the request is failed: the abort
	// ends the job and lets its tab go, and a request still paused when
	// interception goes away is let through.
	if _, err := cdp.Call(ctx, t, fetch.FailRequest, fetch.FailRequestParams{
		RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient,
	}); err != nil && ctx.Err() == nil {
		j.log.Debug("failing a request", "url", truncate(u, 256), "err", err)
	}
	if nav {
		j.rec.tellNavBlocked(be)
	}
}

// stepTimeout is step st's time limit, and the setting it came from: the
// step's timeout_ms, else the script's, else the executor's default. The
// job's deadline bounds it too.
func (j *job) stepTimeout(st Step) (time.Duration, string) {
	switch {
	case st.TimeoutMS > 0 && st.timeoutBy != "":
		return time.Duration(st.TimeoutMS) * time.Millisecond, st.timeoutBy
	case st.TimeoutMS > 0:
		return time.Duration(st.TimeoutMS) * time.Millisecond, "the step's timeout_ms"
	case j.script.TimeoutMS > 0:
		return time.Duration(j.script.TimeoutMS) * time.Millisecond, "the script's timeout_ms"
	}
	return j.e.cfg.StepTimeout, "the worker's default step timeout"
}

// step runs one step under its own timeout.
func (j *job) step(tab context.Context, i int, st Step) error {
	d, by := j.stepTimeout(st)
	sctx, cancel := context.WithCancelCause(tab)
	defer cancel(nil)
	sctx, cancelT := context.WithTimeoutCause(sctx, d, &stepTimeoutError{d, by})
	defer cancelT()
	j.mu.Lock()
	j.abortStep = cancel
	j.mu.Unlock()
	if h := j.e.hooks.stepStarted; h != nil {
		h(i)
	}
	defer func() {
		j.mu.Lock()
		j.abortStep = nil
		j.mu.Unlock()
	}()
	if be := j.rec.takeNavBlocked(); be != nil {
		// A navigation started by the previous step was refused after
		// that step had returned.
		return fmt.Errorf("%w: %w", errNavBlocked, be)
	}
	err := j.perform(sctx, i, st)
	if err != nil && sctx.Err() != nil {
		// Report why the step's context ended rather than a bare
		// "context canceled" from deep inside chromedp.
		if cause := context.Cause(sctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", cause, err)
		}
	}
	if be := j.rec.takeNavBlocked(); be != nil {
		// The main frame tried to leave the allowlist (a navigate, a click
		// on a link, a redirect): the step fails whatever else happened.
		err = fmt.Errorf("%w: %w", errNavBlocked, be)
	}
	return err
}

// abort cancels the running step with cause.
func (j *job) abort(cause error) {
	j.mu.Lock()
	f := j.abortStep
	j.mu.Unlock()
	if f != nil {
		f(cause)
	}
}

// result classifies a failure of step i (or of the setup when i < 0).
func (j *job) result(jctx context.Context, i int, a Action, err error) runtime.Result {
	where := "setup"
	if i >= 0 {
		where = fmt.Sprintf("steps[%d] (%s)", i, a)
	}
	j.mu.Lock()
	pageCrashed := j.crashed
	j.mu.Unlock()
	var le *limitError
	var be *BlockedError
	switch cause := context.Cause(jctx); {
	case j.p.lost():
		return failed(runtime.ReasonCrashed, fmt.Sprintf("%s: the browser process died (%v); the next job gets a fresh browser", where, err))
	case pageCrashed || errors.Is(err, errPageCrashed):
		return failed(runtime.ReasonCrashed, fmt.Sprintf("%s: %v", where, errPageCrashed))
	case errors.Is(cause, errCallerCanceled):
		return failed(runtime.ReasonCanceled, fmt.Sprintf("%s: %v", where, cause))
	case errors.Is(cause, errExecutorClosed):
		return failed(runtime.ReasonCanceled, fmt.Sprintf("%s: %v", where, cause))
	case errors.Is(err, errNavBlocked) && errors.As(err, &be):
		return failed(runtime.ReasonBlocked, fmt.Sprintf("%s: %v", where, be))
	case errors.As(err, &le):
		res := failed(runtime.ReasonOutputLimit, fmt.Sprintf("%s: %s", where, le.msg))
		res.Hint = le.hint
		return res
	}
	// A timeout or an odd failure may be a hung browser: probe it, and if
	// it does not answer, kill it now so the cleanup does not wait on it.
	if perr := j.p.probe(); perr != nil {
		j.p.kill()
		return failed(runtime.ReasonCrashed, fmt.Sprintf("%s: %v; the next job gets a fresh browser", where, perr))
	}
	if errors.Is(context.Cause(jctx), errJobTimeout) {
		res := failed(runtime.ReasonTimeout, fmt.Sprintf("%s: job timed out after %s (%s)", where, j.timeout, j.timeoutBy))
		res.Hint = "raise it with --timeout"
		return res
	}
	return failed(runtime.ReasonStepFailed, fmt.Sprintf("%s: %v", where, err))
}

// oneLine keeps a message on one line and bounded.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return truncate(s, 1024)
}
