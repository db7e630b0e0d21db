package browser

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/headlessexperimental"
)

// A lane is one job slot with a browser of its own, whose frames the
// executor draws on demand (BeginFrame control) instead of on Chromium's
// 60 Hz clock, and the context made ahead for the lane's next job (pool.go).
// DESIGN.md, "Lanes and drawn frames", says why a browser per slot.
type lane struct {
	idx  int
	br   browserRef
	busy bool // a job holds the lane; guarded by Executor.mu
}

// browserRef is one browser role: a lane's, or the sessions' one. Its cur
// is the running process, replaced when it dies or hangs.
type browserRef struct {
	name    string
	frames  bool       // started with BeginFrame control
	startMu sync.Mutex // serialises (re)starts
	cur     *proc      // guarded by Executor.mu
}

// takeLane returns the free lane with the lowest index; the caller holds
// a slot token, so there is one. A lone client so keeps to one browser,
// whose pages and caches are warm.
func (e *Executor) takeLane() *lane {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.lanes {
		if !l.busy {
			l.busy = true
			return l
		}
	}
	panic("browser: a slot token without a free lane")
}

func (e *Executor) freeLane(l *lane) {
	e.mu.Lock()
	l.busy = false
	e.mu.Unlock()
}

// frameInterval is how often a job's page gets a frame while nothing asks
// for one: what requestAnimationFrame callbacks, CSS animations and
// rAF-aligned input need to make progress, at the 60 Hz pages expect.
const frameInterval = 16 * time.Millisecond

// frameRetries bounds the frames a screenshot draws waiting for pixels: a
// page that has just committed may give one or two frames without a
// surface to read back.
const frameRetries = 20

// errNoPixels is returned when every frame of a screenshot came back empty.
var errNoPixels = errors.New("the page drew no frame to capture")

// beginFrame draws one frame of tab t. Frames of one browser never overlap
// (Chromium's viz rejects a BeginFrame while one is pending and then kills
// the GPU process); the lock waits no longer than ctx.
func (p *proc) beginFrame(ctx context.Context, t cdp.Session, params headlessexperimental.BeginFrameParams) (headlessexperimental.BeginFrameResult, error) {
	select {
	case p.frameLock <- struct{}{}:
	case <-ctx.Done():
		return headlessexperimental.BeginFrameResult{}, context.Cause(ctx)
	}
	defer func() { <-p.frameLock }()
	return cdp.Call(ctx, t, headlessexperimental.BeginFrame, params)
}

// pump draws a frame every frameInterval until ctx ends. The frame waits
// for the page's main thread, so a busy page gets fewer frames; only its
// own browser waits with it.
func (p *proc) pump(ctx context.Context, t cdp.Session) {
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_, _ = p.beginFrame(ctx, t, headlessexperimental.BeginFrameParams{})
		tick.Reset(frameInterval)
	}
}

// frameScreenshot draws a frame of tab t and returns it as PNG, drawing
// again while a frame comes back without pixels.
func (p *proc) frameScreenshot(ctx context.Context, t cdp.Session) ([]byte, error) {
	params := headlessexperimental.BeginFrameParams{Screenshot: &headlessexperimental.ScreenshotParams{
		Format: headlessexperimental.ScreenshotParamsFormatPng, OptimizeForSpeed: true,
	}}
	for range frameRetries {
		r, err := p.beginFrame(ctx, t, params)
		if err != nil {
			return nil, err
		}
		if len(r.ScreenshotData) > 0 {
			return r.ScreenshotData, nil
		}
	}
	return nil, fmt.Errorf("%w in %d frames", errNoPixels, frameRetries)
}
