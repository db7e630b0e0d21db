package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// pollInterval is how often wait-style steps re-check the page.
const pollInterval = 50 * time.Millisecond

// perform runs one step's action against the job's tab.
func (j *job) perform(ctx context.Context, i int, st Step) error {
	switch st.Action {
	case ActionNavigate:
		return j.navigate(ctx, i, st.URL)
	case ActionClick:
		if err := waitElement(ctx, st, true); err != nil {
			return err
		}
		return refused("clicking", st.target(), chromedp.Do(ctx, chromedp.Click(chromedp.CSS(st.Selector), chromedp.NodeVisible)))
	case ActionType:
		if err := waitElement(ctx, st, true); err != nil {
			return err
		}
		return refused("typing into", st.target(), chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(st.Selector), st.Text, chromedp.NodeVisible)))
	case ActionPress:
		k, err := keyFor(st.Key)
		if err != nil {
			return err
		}
		return chromedp.Do(ctx, chromedp.KeyEvent(k))
	case ActionWaitFor:
		if st.Selector != "" {
			return waitElement(ctx, st, true)
		}
		return waitText(ctx, st.Text)
	case ActionExtract:
		v, err := extract(ctx, st)
		if err != nil {
			return err
		}
		raw, _ := json.Marshal(v)
		return j.rec.setValue(st.Name, raw)
	case ActionEvaluate:
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](st.Expression, chromedp.EvalAwaitPromise))
		if errors.Is(err, chromedp.ErrJSUndefined) || (err == nil && len(raw) == 0) {
			raw, err = []byte("null"), nil
		}
		if err != nil {
			return fmt.Errorf("evaluating the expression: %w", err)
		}
		return j.rec.setValue(st.Name, raw)
	case ActionScreenshot:
		return j.screenshot(ctx, st)
	case ActionPDF:
		buf, err := chromedp.Run(ctx, chromedp.PrintToPDF(chromedp.PDFPrintBackground()))
		if err != nil {
			return fmt.Errorf("printing to PDF: %w", err)
		}
		return j.rec.addArtifact(st.Name, "application/pdf", buf)
	}
	return fmt.Errorf("unknown action %q", st.Action)
}

// target names the element step st acts on, for messages: its selector,
// or the observe ref a session step named it by (not the internal
// selector the ref stands for).
func (st Step) target() string {
	if st.ref != "" {
		return "ref " + st.ref
	}
	return truncate(st.Selector, 256)
}

// quoted is target with a selector quoted, for messages that quote it.
func (st Step) quoted() string {
	if st.ref != "" {
		return "ref " + st.ref
	}
	return jsString(truncate(st.Selector, 128))
}

// refused explains an error the browser's DevTools protocol answered to
// doing what on the element sel (raw, it read "Element is not focusable
// (-32000)"): what the browser refused, and what to do about it where
// that is known. Other errors pass unchanged.
func refused(what, sel string, err error) error {
	var ce *cdproto.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg := ce.Message
	switch {
	case strings.Contains(msg, "not focusable"):
		return fmt.Errorf("%s %s: the element cannot take keyboard input (it is not focusable): name an input, textarea, select or contenteditable element", what, truncate(sel, 256))
	case strings.Contains(msg, "box model"), strings.Contains(msg, "not visible"), strings.Contains(msg, "not an HTMLElement"):
		return fmt.Errorf("%s %s: the element has no box on the page to act on (hidden, zero-sized, or not an HTML element): name a visible element", what, truncate(sel, 256))
	case strings.Contains(msg, "No node with given id"), strings.Contains(msg, "Could not find node"):
		return fmt.Errorf("%s %s: the element left the page while the step ran (the page replaced it): retry the step", what, truncate(sel, 256))
	}
	return fmt.Errorf("%s %s: the browser refused: %s", what, truncate(sel, 256), msg)
}

// navigate checks the URL against the policy before the browser sees it
// (interception would refuse it too; this gives the clearest message), then
// loads it and waits for the load event. A page that answers an HTTP
// error status (4xx, 5xx) loads as any other; step i's status is recorded
// for Stderr.
func (j *job) navigate(ctx context.Context, i int, u string) error {
	if err := j.pol.checkURL(ctx, u); err != nil {
		var re *resolveError
		if errors.As(err, &re) {
			// A name that does not resolve is a page that cannot be
			// reached, as SCRIPT.md says, not one the policy refused.
			return fmt.Errorf("%w: %v", errUnreachable, re)
		}
		var be *BlockedError
		if !errors.As(err, &be) {
			be = &BlockedError{URL: u, Reason: err.Error()}
		}
		j.rec.blocked(u, "Document", be.Reason, "policy")
		return fmt.Errorf("%w: %w", errNavBlocked, be)
	}
	j.rec.takeNavFailed() // a failure left by an earlier page is not this one's
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(u))
	if err != nil {
		if why := j.rec.takeNavFailed(); why != nil {
			return fmt.Errorf("%w: %v", errUnreachable, why)
		}
		return fmt.Errorf("loading %s: %w", truncate(u, 256), err)
	}
	if resp != nil && resp.Status >= 400 { // nil: about:blank, a fragment
		j.rec.httpError(i, resp.Status, resp.StatusText, resp.URL)
	}
	return nil
}

func (j *job) screenshot(ctx context.Context, st Step) error {
	var (
		buf []byte
		err error
	)
	switch {
	case st.Selector != "":
		if err := waitElement(ctx, st, true); err != nil {
			return err
		}
		buf, err = chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(st.Selector), chromedp.NodeVisible))
	case st.FullPage:
		buf, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	case j.p.frames:
		buf, err = j.p.frameScreenshot(ctx, chromedp.FromContext(ctx).Target)
	default:
		buf, err = chromedp.Run(ctx, viewportPNG())
	}
	if err != nil {
		return fmt.Errorf("taking the screenshot: %w", err)
	}
	return j.rec.addArtifact(st.Name, "image/png", buf)
}

// The page-side checks take their arguments as JSON literals, so a selector
// or text can never break out of the string it is in.
const (
	jsSelectorState = `((sel, visible) => {
  const e = document.querySelector(sel);
  if (!e) return false;
  if (!visible) return true;
  const r = e.getBoundingClientRect(), s = getComputedStyle(e);
  return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none";
})(%s, %t)`
	jsHasText = `(t => !!document.body && document.body.innerText.includes(t))(%s)`
	jsExtract = `((sel, attr) => {
  const e = document.querySelector(sel);
  if (!e) return {found: false};
  if (attr) return e.hasAttribute(attr) ? {found: true, value: e.getAttribute(attr)} : {found: true, missing: true};
  return {found: true, value: e.innerText ?? e.textContent ?? ""};
})(%s, %s)`
)

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// poll evaluates expr until it yields true or ctx ends. Errors from a page
// that is between documents are retried; a JavaScript exception (such as an
// invalid selector) ends the wait at once.
func poll(ctx context.Context, expr, waitingFor string) error {
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return nil
		}
		var ex *chromedp.ExceptionError
		if errors.As(err, &ex) {
			return fmt.Errorf("%s: %w", waitingFor, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for %s: %w", waitingFor, context.Cause(ctx))
		case <-time.After(pollInterval):
		}
	}
}

// waitSelector waits until an element matches sel (and is visible when
// visible is set).
func waitSelector(ctx context.Context, sel string, visible bool) error {
	what := fmt.Sprintf("an element matching %s", jsString(truncate(sel, 128)))
	if visible {
		what = "a visible element matching " + jsString(truncate(sel, 128))
	}
	return poll(ctx, fmt.Sprintf(jsSelectorState, jsString(sel), visible), what)
}

// waitText waits until the page's visible text contains text.
func waitText(ctx context.Context, text string) error {
	return poll(ctx, fmt.Sprintf(jsHasText, jsString(text)), "the page text to contain "+jsString(truncate(text, 128)))
}

// waitElement waits until step st's element is on the page (and visible
// when visible is set), naming it as the step did.
func waitElement(ctx context.Context, st Step, visible bool) error {
	if st.ref == "" {
		return waitSelector(ctx, st.Selector, visible)
	}
	what := st.target() + " to be on the page"
	if visible {
		what = st.target() + " to be visible"
	}
	return poll(ctx, fmt.Sprintf(jsSelectorState, jsString(st.Selector), visible), what)
}

// extract reads the text of step st's element, or one of its attributes,
// waiting for the element to exist.
func extract(ctx context.Context, st Step) (string, error) {
	sel, attr, q := st.Selector, st.Attribute, st.quoted()
	if err := waitElement(ctx, st, false); err != nil {
		return "", err
	}
	var out struct {
		Found   bool   `json:"found"`
		Missing bool   `json:"missing"`
		Value   string `json:"value"`
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](fmt.Sprintf(jsExtract, jsString(sel), jsString(attr))))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", q, err)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("reading %s: %w", q, err)
	}
	switch {
	case !out.Found:
		return "", fmt.Errorf("no element matches %s any more", q)
	case out.Missing:
		return "", fmt.Errorf("the element matching %s has no attribute %q", q, attr)
	}
	return out.Value, nil
}

// viewportPNG captures the viewport as PNG with Chromium's fast encoder
// (a larger file, a fraction of the encoding time: the bulk of a warm
// screenshot job's time otherwise).
func viewportPNG() chromedp.Action[[]byte] {
	return func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		fast, surface := true, true
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{FromSurface: &surface, OptimizeForSpeed: &fast})
		if err != nil {
			return nil, err
		}
		return r.Data, nil
	}
}
