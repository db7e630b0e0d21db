package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
)

// defaultProbeTimeout bounds the liveness probe of a browser.
const defaultProbeTimeout = 3 * time.Second

// errBrowserUnresponsive marks a browser that failed its liveness probe.
var errBrowserUnresponsive = errors.New("browser stopped responding")

// proc is one running Chromium. Jobs open their own browser contexts on it.
type proc struct {
	gen         int
	allocCancel context.CancelFunc
	release     func()          // kills the browser, waits for its exit, removes its profile
	ctx         context.Context // chromedp context owning the browser
	cancel      context.CancelFunc
	b           *chromedp.Browser
	pid         int
	broken      atomic.Bool // set when a probe failed; the next job restarts
	probeLimit  time.Duration
	frames      bool          // started with BeginFrame control (lane.go)
	frameLock   chan struct{} // held while a BeginFrame is pending
}

// allocatorOptions are the Chromium flags. Beyond chromedp's defaults they
// turn off everything that talks to the network on its own (Chromium floods
// refused connections on a closed network otherwise), keep WebRTC from
// sending UDP outside the per-job proxy, and drop the sandbox only as root,
// where Chromium refuses to start with it. RenderDocument is off: with it,
// every navigation builds a new frame host (and, in a tab whose frames we
// draw, a new compositor surface) even when the renderer process stays the
// same; without it a job's first navigation commits into the frame its tab
// opened with, ~12% of a warm screenshot job (DESIGN.md). Process
// isolation is unchanged: a navigation to another site still moves to
// another renderer process, and each job has its own browser context.
//
// With frames, the browser draws a tab only when the executor asks
// (HeadlessExperimental.beginFrame) and runs every compositor stage before
// drawing, so one request gives a complete frame at once instead of on
// the next tick of the 60 Hz clock (DESIGN.md, "Lanes and drawn frames").
func allocatorOptions(cfg Config, frames bool) []chromedp.ExecAllocatorOption {
	opts := append([]chromedp.ExecAllocatorOption{}, chromedp.DefaultExecAllocatorOptions[:]...)
	opts = append(opts,
		chromedp.ExecPath(cfg.ExecPath),
		chromedp.DisableGPU,
		chromedp.WindowSize(cfg.WindowWidth, cfg.WindowHeight),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("disable-popup-blocking", false), // chromedp's default turns the blocker off
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication,InterestFeedContentSuggestions,CertificateTransparencyComponentUpdater,RenderDocument"),
		chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	if frames {
		opts = append(opts,
			chromedp.Flag("enable-begin-frame-control", true),
			chromedp.Flag("run-all-compositor-stages-before-draw", true),
		)
	}
	return opts
}

// launch starts a browser. ctx bounds only the start; the browser lives
// until kill or close.
func launch(ctx context.Context, cfg Config, gen int, frames bool, log *slog.Logger) (*proc, error) {
	opts := allocatorOptions(cfg, frames)
	profile := ""
	if cfg.ProfileDir != "" {
		dir, err := os.MkdirTemp(cfg.ProfileDir, profilePrefix)
		if err != nil {
			return nil, fmt.Errorf("browser: making a profile directory: %w (is --data-dir writable?)", err)
		}
		profile = dir
		opts = append(opts, chromedp.UserDataDir(dir))
	}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	alloc := chromedp.FromContext(allocCtx).Allocator
	release := func() {
		allocCancel()
		if profile != "" {
			alloc.Wait() // the browser has exited
			removeProfile(profile, log)
		}
	}
	bctx, bcancel := chromedp.NewContext(allocCtx,
		chromedp.WithErrorf(func(f string, a ...any) { log.Debug("chromedp: "+fmt.Sprintf(f, a...), "browser_gen", gen) }),
		chromedp.WithLogf(func(f string, a ...any) { log.Debug("chromedp: "+fmt.Sprintf(f, a...), "browser_gen", gen) }),
	)
	stop := context.AfterFunc(ctx, allocCancel)
	timer := time.AfterFunc(cfg.StartTimeout, allocCancel)
	err := chromedp.Do(bctx) // starts the browser; its life is bctx's
	timer.Stop()
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		bcancel()
		release()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("browser: start interrupted: %w", ctx.Err())
		}
		return nil, fmt.Errorf("browser: starting %s: %w (set Config.ExecPath to a working Chromium, or %s)", cfg.ExecPath, err, InstallHint)
	}
	c := chromedp.FromContext(bctx)
	p := &proc{gen: gen, allocCancel: allocCancel, release: release, ctx: bctx, cancel: bcancel, b: c.Browser,
		probeLimit: defaultProbeTimeout, frames: frames, frameLock: make(chan struct{}, 1)}
	if pr := c.Browser.Process(); pr != nil {
		p.pid = pr.Pid
	}
	log.Debug("browser started", "browser_gen", gen, "pid", p.pid, "exec", cfg.ExecPath, "drawn_frames", frames)
	return p, nil
}

// lost reports whether the connection to the browser dropped (it died or
// was killed).
func (p *proc) lost() bool {
	select {
	case <-p.b.LostConnection:
		return true
	default:
		return false
	}
}

// usable reports whether new jobs may run on this browser.
func (p *proc) usable() bool { return !p.lost() && !p.broken.Load() }

// probe asks the browser for its version; a browser that cannot answer
// within probeLimit is marked broken.
func (p *proc) probe() error {
	if p.lost() {
		return errors.New("browser process exited")
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.probeLimit)
	defer cancel()
	if _, err := cdp.Call(ctx, p.b, browser.GetVersion, cdp.Empty{}); err != nil {
		p.broken.Store(true)
		return fmt.Errorf("%w: %w", errBrowserUnresponsive, err)
	}
	return nil
}

// kill stops the process at once and releases its resources in the
// background (its profile is removed after the exit).
func (p *proc) kill() {
	p.broken.Store(true)
	p.allocCancel()
	go func() {
		p.cancel()
		p.release()
	}()
}

// close shuts the browser down, gracefully if it answers before ctx ends.
func (p *proc) close(ctx context.Context) error {
	p.broken.Store(true)
	done := make(chan error, 1)
	go func() {
		gctx, cancel := context.WithCancel(p.ctx)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		done <- chromedp.Cancel(gctx)
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.allocCancel()
	p.cancel()
	p.release()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	// A browser that is already exiting (the same SIGTERM reached it, as
	// Ctrl-C reaches the whole process group) answers Browser.close with
	// "method not found": it is closing, which is what was asked.
	var cdpErr *cdproto.Error
	if errors.As(err, &cdpErr) && cdpErr.Code == -32601 {
		err = nil
	}
	return err
}

// profilePrefix names the profile directories under Config.ProfileDir;
// only those are ever removed there.
const profilePrefix = "profile-"

// clearProfiles makes dir (when set) and removes the profiles left in it
// by browsers of a process that was killed.
func clearProfiles(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("browser: making the profile directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("browser: reading the profile directory: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), profilePrefix) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("browser: removing a profile left by a killed browser: %w", err)
		}
	}
	return nil
}

// removeProfile removes an exited browser's profile. Chromium's child
// processes can still write in it for a moment after the browser exits,
// so a failed removal is tried again for a while.
func removeProfile(dir string, log *slog.Logger) {
	var err error
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err = os.RemoveAll(dir); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		log.Warn("could not remove a browser profile; the next start removes it", "dir", dir, "err", err)
	}
}
