package browser

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/palyra-mesh/palyra/runtime"
)

// Session limits, the original Palyra browser service's defaults.
const (
	DefaultMaxSessions     = 4
	DefaultSessionIdleTTL  = 10 * time.Minute
	DefaultSessionLifetime = 30 * time.Minute
	SessionNavigateTimeout = 15 * time.Second
	SessionActionTimeout   = 5 * time.Second
	MaxSessionScreenshot   = 256 << 10
	MaxSessionActions      = 256
	maxSessionValues       = 256 << 10
	maxObserveElements     = 200
)

// ErrNoSession: the session does not exist here (never did, was closed,
// expired, or its worker restarted; sessions live in one worker's memory).
var ErrNoSession = errors.New("no such browser session")

// ErrSessionsFull: the worker has its maximum of sessions open.
var ErrSessionsFull = errors.New("this worker has its maximum of browser sessions open")

// SessionSpec is what a session may reach.
type SessionSpec struct {
	ID           string // optional: the id to give it (the node's routable form); default "bs-" and 16 hex digits
	Owner        string // the principal that opened it
	AllowHosts   []string
	AllowPrivate bool
}

// SessionInfo describes an open session.
type SessionInfo struct {
	ID           string
	Owner        string
	AllowHosts   []string
	AllowPrivate bool
	CreatedAt    time.Time
	LastUsedAt   time.Time
	Actions      int
	URL          string
}

// SessionResult is what one Do call produced.
type SessionResult struct {
	Values       []byte // JSON object of the values extract/evaluate set in this call
	Observations []string
	Artifacts    []runtime.Artifact
	URL          string
	Actions      int // used so far, of MaxSessionActions
	// Notes say what happened on the page besides the steps since the last
	// call: the JavaScript dialogs it opened and how they were answered
	// (`dialog: confirm "Sure?" from https://…/: dismissed`), a
	// navigation the page started by itself that the policy blocked
	// (`navigation blocked between calls: …`), and a page that stopped
	// answering after the last step. Each is said once, here: observe
	// shows the page's state only.
	Notes []string
}

type session struct {
	info   SessionInfo
	j      *job
	jctx   context.Context // the session's life; a replaced tab follows it too
	tab    context.Context // the page steps run on; replaced by unstick
	cancel context.CancelCauseFunc
	mu     sync.Mutex // one call at a time; guards tab and idleNotes
	// idleNotes say what the reaper did to the page between calls, for
	// the next call's Notes; idleMisses counts its checks in a row that
	// the page did not answer.
	idleNotes  []string
	idleMisses int
}

// sessionID is "bs-" and 16 hex digits: unguessable, so knowing a
// session's id is not a way into it (the owner check still applies).
func sessionID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "bs-" + hex.EncodeToString(b)
}

var errSessionExpired = errors.New("browser session ended")

// OpenSession opens an isolated browser context (its own cookies, storage,
// cache and egress proxy, as a job's) that later calls drive step by step.
func (e *Executor) OpenSession(ctx context.Context, spec SessionSpec) (SessionInfo, error) {
	pol, err := newPolicy(spec.AllowHosts, spec.AllowPrivate, e.res)
	if err != nil {
		return SessionInfo{}, err
	}
	pol.owner = "session"
	e.sessMu.Lock()
	if e.closedLocked() {
		e.sessMu.Unlock()
		return SessionInfo{}, errExecutorClosed
	}
	if len(e.sessions) >= e.cfg.MaxSessions {
		mine := 0
		for _, s := range e.sessions {
			if s != nil && s.info.Owner == spec.Owner {
				mine++
			}
		}
		e.sessMu.Unlock()
		if mine == 0 {
			// Closing one is no advice to a caller who holds none (and
			// cannot see or close the others').
			return SessionInfo{}, fmt.Errorf("%w (%d), all held by other callers; they close after %s unused: try again later or on another worker", ErrSessionsFull, e.cfg.MaxSessions, e.cfg.SessionIdleTTL)
		}
		return SessionInfo{}, fmt.Errorf("%w (%d), %d of them yours; close one ('palyra browser list', 'palyra browser close ID') or use another worker", ErrSessionsFull, e.cfg.MaxSessions, mine)
	}
	id := spec.ID
	if id == "" {
		id = sessionID()
	}
	if len(id) > 64 || !sessionIDRE.MatchString(id) {
		e.sessMu.Unlock()
		return SessionInfo{}, fmt.Errorf("session id %q: want up to 64 of a-z, 0-9 and '-'", id)
	}
	if _, taken := e.sessions[id]; taken {
		e.sessMu.Unlock()
		return SessionInfo{}, fmt.Errorf("session id %s is taken", id)
	}
	e.sessions[id] = nil // reserved while it opens
	e.sessMu.Unlock()
	release := func() {
		e.sessMu.Lock()
		delete(e.sessions, id)
		e.sessMu.Unlock()
	}
	p, err := e.browser(ctx, &e.sess)
	if err != nil {
		release()
		return SessionInfo{}, err
	}
	base, cancel := context.WithCancelCause(p.ctx)
	stopLife := context.AfterFunc(e.life, func() { cancel(errExecutorClosed) })
	jctx, cancelT := context.WithTimeoutCause(base, e.cfg.SessionLifetime, fmt.Errorf("%w: its lifetime of %s ran out", errSessionExpired, e.cfg.SessionLifetime))
	j := &job{e: e, p: p, script: &Script{}, pol: pol, timeout: e.cfg.SessionLifetime,
		rec: newRecorder(maxSessionValues, MaxSessionScreenshot, MaxSessionScreenshot*4), log: e.log.With("session", id)}
	j.onCleanup(func() { stopLife(); cancelT(); cancel(errSessionExpired) })
	tab, err := j.open(jctx)
	if err == nil {
		// Open the tab now, so the first call does not pay for it.
		err = chromedp.Do(tab, chromedp.Navigate("about:blank"))
	}
	if err != nil {
		j.cleanup()
		release()
		return SessionInfo{}, fmt.Errorf("opening the browser session: %w", err)
	}
	now := time.Now()
	s := &session{j: j, jctx: jctx, tab: tab, cancel: cancel, info: SessionInfo{ID: id, Owner: spec.Owner,
		AllowHosts: append([]string(nil), spec.AllowHosts...), AllowPrivate: spec.AllowPrivate, CreatedAt: now, LastUsedAt: now}}
	e.sessMu.Lock()
	e.sessions[id] = s
	e.sessMu.Unlock()
	e.log.Info("browser session opened", "session", id, "owner", spec.Owner)
	return s.info, nil
}

func (e *Executor) closedLocked() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// session finds an open session.
func (e *Executor) session(id string) (*session, error) {
	e.sessMu.Lock()
	defer e.sessMu.Unlock()
	s := e.sessions[id]
	if s == nil {
		return nil, e.noSessionLocked(id)
	}
	return s, nil
}

// noSessionLocked is the error of a call to session id, which is not
// open: one that ended here lately is already closed or expired, and says
// so; of another, the worker knows nothing more. It is an ErrNoSession.
// e.sessMu is held.
func (e *Executor) noSessionLocked(id string) error {
	if end, ok := e.ended.by[id]; ok {
		return &sessionEndedError{id: id, end: end}
	}
	return fmt.Errorf("%w %s on this worker: it was closed, expired (idle %s, lifetime %s) or its worker restarted", ErrNoSession, id, e.cfg.SessionIdleTTL, e.cfg.SessionLifetime)
}

// maxEndedSessions bounds how many ended sessions an executor remembers,
// to tell a later call that its session is already closed or expired.
const maxEndedSessions = 256

// sessionEnd is how and when a session ended: closed, or expired (why
// says how).
type sessionEnd struct {
	state string // "closed" or "expired"
	why   string // for "expired": "unused for more than 10m0s", …
	at    time.Time
}

// endedSessions remembers the sessions that ended here lately, the
// latest maxEndedSessions (guarded by Executor.sessMu).
type endedSessions struct {
	by    map[string]sessionEnd
	order []string // oldest first
}

func (es *endedSessions) add(id string, end sessionEnd) {
	if es.by == nil {
		es.by = map[string]sessionEnd{}
	}
	if len(es.order) >= maxEndedSessions {
		delete(es.by, es.order[0])
		es.order = es.order[1:]
	}
	es.by[id] = end
	es.order = append(es.order, id)
}

// sessionEndedError is the error of a call to a session that ended here:
// closing it again, or driving it after. It is an ErrNoSession (the API's
// not_found), as cancelling a job that ended is an error.
type sessionEndedError struct {
	id  string
	end sessionEnd
}

func (e *sessionEndedError) Error() string {
	ago := time.Since(e.end.at)
	if ago >= time.Second {
		ago = ago.Round(time.Second)
	} else {
		ago = ago.Round(time.Millisecond)
	}
	if e.end.why == "" {
		return fmt.Sprintf("browser session %s is already %s (%s %s ago)", e.id, e.end.state, e.end.state, ago)
	}
	return fmt.Sprintf("browser session %s is already %s (%s; it ended %s ago)", e.id, e.end.state, e.end.why, ago)
}

func (e *sessionEndedError) Unwrap() error { return ErrNoSession }

// Session describes session id.
func (e *Executor) Session(id string) (SessionInfo, error) {
	s, err := e.session(id)
	if err != nil {
		return SessionInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info, nil
}

var (
	refRE       = regexp.MustCompile(`^e[0-9]{1,6}$`)
	sessionIDRE = regexp.MustCompile(`^[a-z0-9-]+$`)
)

// refSelector is the selector of an element observe labelled.
func refSelector(ref string) string { return fmt.Sprintf(`[data-palyra-ref=%q]`, ref) }

// Do runs steps in the session, in order: the script steps (a step may
// name an element by "ref", from an earlier observe, instead of by
// "selector"), plus "observe", which returns a compact snapshot of the
// page with a ref for each element a later step can target. Navigations
// get 15 s, other steps 5 s, unless they set timeout_ms. The steps are
// checked before any runs (sessionSteps): no two may use one name.
func (e *Executor) Do(ctx context.Context, id string, steps []json.RawMessage) (SessionResult, error) {
	s, err := e.session(id)
	if err != nil {
		return SessionResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tab.Err() != nil {
		return SessionResult{}, fmt.Errorf("%w %s: %v", ErrNoSession, id, context.Cause(s.tab))
	}
	if s.info.Actions+len(steps) > MaxSessionActions {
		return SessionResult{}, fmt.Errorf("the session has used %d of its %d actions; %d more would pass the limit: open a new session", s.info.Actions, MaxSessionActions, len(steps))
	}
	calls, err := sessionSteps(steps)
	if err != nil {
		return SessionResult{}, err
	}
	s.info.LastUsedAt = time.Now()
	var res SessionResult
	done := func(err error) (SessionResult, error) {
		if be := s.j.rec.takeNavBlocked(); be != nil {
			// Refused after the call's last step had returned (a link it
			// clicked, a script it started).
			res.Notes = append(res.Notes, navBlockedNote(be, "after the call's last step"))
		}
		res.Values = s.j.rec.takeValues()
		res.Notes = append(s.j.rec.takeCallNotes(), res.Notes...)
		return res, err
	}
	res.Notes, s.idleNotes = s.idleNotes, nil
	if be := s.j.rec.takeNavBlocked(); be != nil {
		// The page started it by itself between calls (a timer, a meta
		// refresh): a note, not the failure of this call's first step.
		res.Notes = append(res.Notes, navBlockedNote(be, "between calls"))
	}
	if s.j.pageHasCrashed() && !s.j.p.lost() {
		// Between calls: the call goes on, on the new page.
		res.Notes = append(res.Notes, "the page crashed after the last call ("+errPageCrashed.Error()+"); "+s.recoverCrash())
	}
	stop := context.AfterFunc(ctx, func() { s.j.abort(errCallerCanceled) })
	defer stop()
	for i, cs := range calls {
		s.info.Actions++
		st := cs.st
		if cs.observe {
			obs, err := s.observe()
			if err != nil {
				return done(s.stepError(i, "observe", err))
			}
			res.Observations = append(res.Observations, obs)
			continue
		}
		if st.ref != "" && st.Action != ActionWaitFor {
			// A ref names an element observe labelled; one that is gone
			// will not come back, so say so now rather than after the
			// step's timeout, in the caller's terms.
			if err := s.refPresent(st.Selector, st.ref); err != nil {
				return done(s.stepError(i, string(st.Action), err))
			}
		}
		if err := s.j.step(s.tab, i, st); err != nil {
			if s.j.pageHasCrashed() && !s.j.p.lost() {
				return done(s.stepError(i, string(st.Action), err))
			}
			r := s.j.result(s.tab, i, st.Action, err)
			var te *stepTimeoutError
			if r.Reason == runtime.ReasonStepFailed && errors.As(err, &te) {
				if did := s.unstick(); did != "" {
					// The timeout, and what was done about it; what the
					// step was waiting on when it ran out says nothing more.
					return done(fmt.Errorf("steps[%d] (%s): %v; %s", i, st.Action, te, did))
				}
			}
			if r.Hint != "" { // a limit's fix (--max-output, --timeout): a step's error says it whole
				return done(fmt.Errorf("%s; %s", r.Message, r.Hint))
			}
			return done(errors.New(r.Message))
		}
	}
	res.Artifacts = s.j.rec.takeArtifactsReset()
	res.URL = s.location(&res)
	s.info.URL, res.Actions = res.URL, s.info.Actions
	return done(nil)
}

// observe runs the observe snapshot: the page's state only. What else
// happened on the page (dialogs, blocked navigations) is in the call's
// Notes, once.
func (s *session) observe() (string, error) {
	octx, cancel := context.WithTimeoutCause(s.tab, SessionActionTimeout, sessionTimeout())
	obs, err := chromedp.Run(octx, chromedp.Evaluate[string](jsObserve))
	cancel()
	if err != nil {
		return "", s.timedOut(octx, err)
	}
	return obs, nil
}

// stepError is the error of step i, which failed with err. When the
// page's renderer died under it, that is the error, and the session's
// page is replaced so that the session can go on (every later call
// failed "page crashed" until the session ended).
func (s *session) stepError(i int, action string, err error) error {
	if s.j.pageHasCrashed() && !s.j.p.lost() {
		return fmt.Errorf("steps[%d] (%s): %v; %s", i, action, errPageCrashed, s.recoverCrash())
	}
	return fmt.Errorf("steps[%d] (%s): %w", i, action, err)
}

// recoverCrash replaces the session's page, whose renderer died, by a
// blank one in the same browser context, and says what it did. The
// renderer of a crashed page is gone: nothing on it can be saved, but the
// context's cookies and storage live in the browser process.
func (s *session) recoverCrash() string {
	if err := s.replacePage("crashed"); err != nil {
		return fmt.Sprintf("replacing the page failed (%v); close the session", err)
	}
	s.j.clearCrashed()
	return "the session's page was replaced by a blank one (cookies and storage are kept): navigate again"
}

// replacePage puts a blank tab in the same browser context in place of the
// session's page (ready.replaceTab), and logs why.
func (s *session) replacePage(why string) error {
	// Not from s.tab: replacing the tab ends it.
	ctx, cancel := context.WithTimeout(s.jctx, cleanupTimeout)
	defer cancel()
	tab, err := s.j.ready.replaceTab(ctx, s.j, s.jctx)
	if err != nil {
		s.j.log.Warn("replacing a session's page", "why", why, "err", err)
		return err
	}
	s.tab = tab
	s.j.log.Info("replaced a session's page", "why", why)
	return nil
}

// location is the page's URL after a call. A page that no longer answers
// (its script began to spin after the last step) is unstuck, and a note
// says so.
func (s *session) location(res *SessionResult) string {
	lctx, cancel := context.WithTimeoutCause(s.tab, SessionActionTimeout, sessionTimeout())
	u, err := chromedp.Run(lctx, chromedp.Location())
	cancel()
	if err == nil {
		return u
	}
	if lctx.Err() != nil && s.tab.Err() == nil {
		if did := s.unstick(); did != "" {
			res.Notes = append(res.Notes, "the page stopped answering after the last step; "+did)
			lctx, cancel := context.WithTimeout(s.tab, SessionActionTimeout)
			defer cancel()
			u, _ = chromedp.Run(lctx, chromedp.Location())
		}
	}
	return u
}

// timedOut explains err, from a call bounded by ctx: when ctx's time ran
// out, the page is unstuck and the error says what was done.
func (s *session) timedOut(ctx context.Context, err error) error {
	var te *stepTimeoutError
	if ctx.Err() == nil || !errors.As(context.Cause(ctx), &te) {
		return err
	}
	if did := s.unstick(); did != "" {
		return fmt.Errorf("%v; %s", te, did)
	}
	return te
}

// pageAnswerTimeout bounds the check that a session's page still answers
// after a call on it ran out of time; a page whose main thread is free
// answers within a millisecond or two. terminateTimeout bounds the wait
// for a script to stop: one in a plain loop stops at once, one that does
// not stop within it (a page alerting in a loop) gets its page replaced.
const (
	pageAnswerTimeout = 500 * time.Millisecond
	terminateTimeout  = time.Second
)

// Why unstick acted, for the error of the call that ran out of time.
const (
	stoppedScript = "the page's script was stopped"
	replacedPage  = "the page's script did not stop, so the session's page was replaced by a blank one (cookies and storage are kept)"
)

// unstick runs when a call on the session's page ran out of time. A page
// that then does not answer is running a script that does not return
// (while(true){}, a page that spins): its renderer would keep a core busy
// and every later call would time out too, until the session ended. So
// unstick stops the script (Runtime.terminateExecution, which the renderer
// takes off its busy main thread); if the page still does not answer (a
// timer starts the spinning again, a synchronous request hangs), the
// session's page is closed and replaced by a blank one in the same browser
// context, whose cookies, storage and cache stay. It says what it did, or
// "" when the page answered: the call was waiting on something else (a
// slow server, an element that never came), and the page is left alone.
func (s *session) unstick() string {
	if s.tab.Err() != nil {
		return ""
	}
	t := chromedp.FromContext(s.tab).Target
	if pageAnswers(s.tab, t) {
		return ""
	}
	if s.stopScript(t) {
		s.j.log.Info("a session step timed out on a script that did not return; stopped it")
		return stoppedScript
	}
	if err := s.replacePage("its script did not stop"); err != nil {
		return fmt.Sprintf("the page's script did not stop, and replacing the page failed (%v); close the session", err)
	}
	return replacedPage
}

// maxIdleNotes bounds the notes the reaper keeps for a session's next call.
const maxIdleNotes = 8

// stopScript stops the script running on t's page
// (Runtime.terminateExecution, which the renderer takes off its busy main
// thread) and reports whether the page answers afterwards.
func (s *session) stopScript(t *chromedp.Target) bool {
	ctx, cancel := context.WithTimeout(s.tab, terminateTimeout)
	_, err := cdp.Call(ctx, t, cdpruntime.TerminateExecution, cdp.Empty{})
	cancel()
	return err == nil && pageAnswers(s.tab, t)
}

// pageAnswers reports whether t's page answers a trivial evaluation within
// pageAnswerTimeout; any reply counts, an error too.
func pageAnswers(tab context.Context, t *chromedp.Target) bool {
	ctx, cancel := context.WithTimeout(tab, pageAnswerTimeout)
	defer cancel()
	_, err := cdp.Call(ctx, t, cdpruntime.Evaluate, cdpruntime.EvaluateParams{Expression: "1"})
	return err == nil || ctx.Err() == nil
}

// refPresent checks that the element labelled ref is on the page.
func (s *session) refPresent(sel, ref string) error {
	ctx, cancel := context.WithTimeoutCause(s.tab, SessionActionTimeout, sessionTimeout())
	defer cancel()
	found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf("document.querySelector(%s) !== null", jsString(sel))))
	if err != nil {
		return fmt.Errorf("looking for ref %s: %w", ref, s.timedOut(ctx, err))
	}
	if !found {
		return fmt.Errorf("ref %s is not on the page: refs come from observe and last until the page replaces their element; run observe again", ref)
	}
	return nil
}

// sessionTimeout is the cause that ends a session's observe, ref check,
// URL read or Screenshot that ran out of time.
func sessionTimeout() error {
	return &stepTimeoutError{SessionActionTimeout, "the session's default"}
}

// callStep is one step of a Do call, decoded.
type callStep struct {
	st      Step
	observe bool
}

// sessionSteps decodes and checks the steps of a Do call, before any runs,
// as a job's script is: a bad step, or a value or artifact name that an
// earlier step of the call already uses, refuses the call. A step may name
// an element by "ref" (from observe) instead of by "selector"; an unnamed
// extract or evaluate gets the name step<i>, and an unnamed screenshot or
// pdf step<i>.png or step<i>.pdf, i being its index in the call, so no two
// steps of a call write the same name. A step without timeout_ms gets the
// session's default (15 s for navigate, 5 s for the others).
func sessionSteps(raws []json.RawMessage) ([]callStep, error) {
	out := make([]callStep, len(raws))
	var names usedNames
	for i, raw := range raws {
		st, observe, err := sessionStep(raw, i)
		if err == nil && !observe {
			err = names.add(i, st)
		}
		if err != nil {
			var se *ScriptError
			if errors.As(err, &se) {
				return nil, fmt.Errorf("steps[%d]: %s", i, se.Msg)
			}
			return nil, err
		}
		out[i] = callStep{st: st, observe: observe}
	}
	return out, nil
}

// sessionStep decodes step i of a Do call, with its session defaults. It
// reports whether the step is observe.
func sessionStep(raw json.RawMessage, i int) (st Step, observe bool, err error) {
	if len(raw) > MaxScriptBytes {
		return Step{}, false, fmt.Errorf("steps[%d]: the step is %d bytes, the limit is %d", i, len(raw), MaxScriptBytes)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return Step{}, false, fmt.Errorf("steps[%d]: not a JSON object: %v", i, err)
	}
	if m["action"] == "observe" {
		if len(m) != 1 {
			return Step{}, false, fmt.Errorf("steps[%d]: observe takes no fields", i)
		}
		return Step{}, true, nil
	}
	var ref string
	if v, ok := m["ref"]; ok {
		r, _ := v.(string)
		if !refRE.MatchString(r) {
			return Step{}, false, fmt.Errorf("steps[%d]: ref %q is not an element reference from observe (like e12)", i, r)
		}
		if _, both := m["selector"]; both {
			return Step{}, false, fmt.Errorf(`steps[%d]: give "ref" or "selector", not both`, i)
		}
		delete(m, "ref")
		m["selector"] = refSelector(r)
		ref = r
	}
	if _, named := m["name"]; !named && (m["action"] == string(ActionExtract) || m["action"] == string(ActionEvaluate)) {
		m["name"] = fmt.Sprintf("step%d", i)
	}
	one, _ := json.Marshal(m)
	st, err = parseStep(i, one)
	if err != nil {
		return Step{}, false, err
	}
	st.ref = ref
	if st.TimeoutMS == 0 {
		d, by := SessionActionTimeout, "the session's default"
		if st.Action == ActionNavigate {
			d, by = SessionNavigateTimeout, "the session's default for navigate"
		}
		st.TimeoutMS, st.timeoutBy = d.Milliseconds(), by
	}
	return st, false, nil
}

// Screenshot captures the session's viewport as PNG (JPEG when a PNG
// would pass MaxSessionScreenshot).
func (e *Executor) Screenshot(ctx context.Context, id string) ([]byte, string, error) {
	s, err := e.session(id)
	if err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.LastUsedAt = time.Now()
	sctx, cancel := context.WithTimeoutCause(s.tab, SessionActionTimeout, sessionTimeout())
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	buf, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
	if err != nil {
		return nil, "", fmt.Errorf("taking the screenshot: %w", s.timedOut(sctx, err))
	}
	if len(buf) <= MaxSessionScreenshot {
		return buf, "image/png", nil
	}
	for _, q := range []int64{80, 60, 40} {
		// The same viewport as a JPEG (FullScreenshot would take the whole
		// page, larger still on a long one).
		buf, err = chromedp.Run(sctx, viewportJPEG(q))
		if err == nil && len(buf) <= MaxSessionScreenshot {
			return buf, "image/jpeg", nil
		}
	}
	return nil, "", fmt.Errorf("the screenshot is over the %d KiB limit even as a JPEG; read what you need from the page instead ('observe', or 'extract SELECTOR NAME')", MaxSessionScreenshot>>10)
}

// CloseSession closes a session and disposes of its browser context. A
// session that is not open is an error (an ErrNoSession), which says when
// the session was already closed or expired.
func (e *Executor) CloseSession(id string) error {
	return e.closeSession(id, sessionEnd{state: "closed"})
}

// closeSession closes session id, remembering how it ended.
func (e *Executor) closeSession(id string, end sessionEnd) error {
	e.sessMu.Lock()
	s := e.sessions[id]
	if s == nil {
		defer e.sessMu.Unlock()
		return e.noSessionLocked(id)
	}
	delete(e.sessions, id)
	end.at = time.Now()
	e.ended.add(id, end)
	e.sessMu.Unlock()
	s.cancel(errSessionExpired)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.j.cleanup()
	e.log.Info("browser session closed", "session", id)
	return nil
}

// Sessions lists the open sessions, oldest first.
func (e *Executor) Sessions() []SessionInfo {
	e.sessMu.Lock()
	list := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		if s != nil {
			list = append(list, s)
		}
	}
	e.sessMu.Unlock()
	out := make([]SessionInfo, 0, len(list))
	for _, s := range list {
		if s.mu.TryLock() {
			out = append(out, s.info)
			s.mu.Unlock()
		} else { // busy in a call: its info is being updated
			out = append(out, SessionInfo{ID: s.info.ID, Owner: s.info.Owner, CreatedAt: s.info.CreatedAt})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].CreatedAt.Before(out[b].CreatedAt) })
	return out
}

// reapSessions closes sessions idle past their TTL or past their
// lifetime, until the executor closes (and then closes them all).
func (e *Executor) reapSessions() {
	every := min(e.cfg.SessionIdleTTL/4, 10*time.Second)
	t := time.NewTicker(max(every, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-e.life.Done():
			for _, s := range e.Sessions() {
				e.CloseSession(s.ID)
			}
			return
		case <-t.C:
		}
		now := time.Now()
		e.sessMu.Lock()
		stale := map[string]sessionEnd{}
		var idle []*session
		for id, s := range e.sessions {
			if s == nil || !s.mu.TryLock() {
				continue // opening, or in a call: not idle
			}
			switch {
			case now.Sub(s.info.CreatedAt) > e.cfg.SessionLifetime:
				stale[id] = sessionEnd{state: "expired", why: fmt.Sprintf("its lifetime of %s ran out", e.cfg.SessionLifetime)}
			case now.Sub(s.info.LastUsedAt) > e.cfg.SessionIdleTTL:
				stale[id] = sessionEnd{state: "expired", why: fmt.Sprintf("unused for more than %s", e.cfg.SessionIdleTTL)}
			default:
				idle = append(idle, s)
			}
			s.mu.Unlock()
		}
		e.sessMu.Unlock()
		for id, end := range stale {
			if e.closeSession(id, end) == nil {
				e.log.Info("browser session expired", "session", id, "why", end.why)
			}
		}
		for _, s := range idle {
			s.checkIdlePage()
		}
	}
}

// checkIdlePage stops the script of a session's page that has not
// answered two checks in a row between calls: a page whose script began
// to spin after a call (a timer, a handler) kept a renderer at 100% of a
// core until the next call ran out of time on it or the session expired.
// One slow answer (a page busy with a heavy load the last click started,
// a loaded host) is not enough, and the reaper only stops the script: a
// page that still does not answer is replaced by the next call (unstick),
// which says so, never between calls. A healthy page answers within a
// millisecond or two; a session in a call is skipped. The next call's
// Notes say what was done.
func (s *session) checkIdlePage() {
	if !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if s.jctx.Err() != nil || s.tab.Err() != nil || s.j.pageHasCrashed() {
		return
	}
	t := chromedp.FromContext(s.tab).Target
	if pageAnswers(s.tab, t) {
		s.idleMisses = 0
		return
	}
	if s.idleMisses++; s.idleMisses < 2 {
		return
	}
	s.idleMisses = 0
	if s.stopScript(t) {
		s.j.log.Info("an idle session's page kept running a script; stopped it")
		if len(s.idleNotes) < maxIdleNotes { // a page that keeps doing it between two calls of a long idle
			s.idleNotes = append(s.idleNotes, "the page stopped answering between calls; its script was stopped")
		}
	}
}

// jsObserve labels the page's visible, meaningful elements with
// data-palyra-ref (stable until the page changes them) and returns one
// line per element: ref, role or tag, and its name or text, compact.
const jsObserve = `(() => {
  const max = ` + "200" + `;
  const sel = 'a[href],button,input,select,textarea,summary,[role=button],[role=link],[role=checkbox],[role=tab],[role=menuitem],[contenteditable=true],h1,h2,h3,label';
  let next = 0;
  for (const e of document.querySelectorAll('[data-palyra-ref]')) {
    const n = parseInt(e.getAttribute('data-palyra-ref').slice(1), 10);
    if (n >= next) next = n + 1;
  }
  const lines = ['page: ' + document.title + ' <' + location.href + '>'];
  let count = 0;
  for (const e of document.querySelectorAll(sel)) {
    const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    if (r.width === 0 || r.height === 0 || s.visibility === 'hidden' || s.display === 'none') continue;
    if (++count > max) { lines.push('… more elements not shown'); break; }
    let ref = e.getAttribute('data-palyra-ref');
    if (!ref) { ref = 'e' + (next++); e.setAttribute('data-palyra-ref', ref); }
    const tag = e.tagName.toLowerCase();
    let kind = e.getAttribute('role') || tag;
    if (tag === 'input') kind = 'input[' + (e.getAttribute('type') || 'text') + ']';
    let name = e.getAttribute('aria-label') || e.getAttribute('placeholder') || e.getAttribute('name') || (e.innerText || e.value || '').trim();
    name = name.replace(/\s+/g, ' ').slice(0, 80);
    let extra = '';
    if (tag === 'a') extra = ' -> ' + (e.getAttribute('href') || '').slice(0, 120);
    if ((tag === 'input' || tag === 'textarea') && e.value && e.type !== 'password') extra = ' = ' + JSON.stringify(e.value.slice(0, 40));
    lines.push(ref + ' ' + kind + ' ' + JSON.stringify(name) + extra);
  }
  return lines.join('\n');
})()`

// viewportJPEG captures the viewport (not the whole page) as a JPEG of
// quality q.
func viewportJPEG(q int64) chromedp.Action[[]byte] {
	return func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		surface := true
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{FromSurface: &surface,
			Format: page.CaptureScreenshotFormatJpeg, Quality: &q})
		if err != nil {
			return nil, err
		}
		return r.Data, nil
	}
}
