package browser

import (
	"bytes"
	"context"
	"image/color"
	"image/png"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/palyra-mesh/palyra/runtime"
)

// centre returns the colour at the middle of a PNG artifact.
func centre(t *testing.T, a runtime.Artifact) color.RGBA {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(a.Data))
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", a.Name, err)
	}
	b := img.Bounds()
	r, g, bl, _ := img.At(b.Min.X+b.Dx()/2, b.Min.Y+b.Dy()/2).RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 255}
}

// TestDrawnFramesShowThePageAndRunAnimationFrames: on a lane's browser,
// whose frames are drawn on demand, a screenshot shows the page as it is
// now, and requestAnimationFrame callbacks run (the frame pump), so a page
// that renders in one is shown rendered.
func TestDrawnFramesShowThePageAndRunAnimationFrames(t *testing.T) {
	e := shared(t)
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/blue":
			html(w, `<style>html,body{margin:0;height:100%;background:#0000cc}</style><p>blue</p>`)
		default: // paints in animation frames only
			html(w, `<style>html,body{margin:0;height:100%}</style><script>
let n = 0;
function step() { if (++n < 5) { requestAnimationFrame(step); return; }
  document.body.style.background = '#00cc00'; document.body.append('drawn'); }
requestAnimationFrame(step);
</script>`)
		}
	}))
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/blue"},
		map[string]any{"action": "screenshot", "name": "blue.png"},
		map[string]any{"action": "navigate", "url": site.URL + "/raf"},
		map[string]any{"action": "wait_for", "text": "drawn", "timeout_ms": 10000},
		map[string]any{"action": "screenshot", "name": "green.png"},
	)))
	mustOK(t, r)
	if len(r.Artifacts) != 2 {
		t.Fatalf("got %d artifacts, want 2", len(r.Artifacts))
	}
	if c := centre(t, r.Artifacts[0]); c != (color.RGBA{0, 0, 0xcc, 255}) {
		t.Errorf("centre of the blue page is %v, want #0000cc", c)
	}
	if c := centre(t, r.Artifacts[1]); c != (color.RGBA{0, 0xcc, 0, 255}) {
		t.Errorf("centre of the page drawn in animation frames is %v, want #00cc00", c)
	}
}

// TestBusyPageHoldsOnlyItsOwnLane: a page whose script never yields holds
// its frames, and so its own lane; a job on the other lane still draws
// and captures its page, and finishes while the busy job still runs.
func TestBusyPageHoldsOnlyItsOwnLane(t *testing.T) {
	e := newExecutor(t, Config{Slots: 2, Prewarm: true})
	spinning := make(chan struct{})
	var once sync.Once
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/busy":
			html(w, `<p>soon busy</p>`)
		case "/spinning": // the busy page's last request before its loop
			once.Do(func() { close(spinning) })
			w.WriteHeader(http.StatusNoContent)
		default:
			html(w, `<style>html,body{margin:0;height:100%;background:#0000cc}</style>`)
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busyDone := make(chan runtime.Result, 1)
	go func() {
		// A synchronous request, then a loop that never yields: once the
		// server has seen the request, the page's main thread is stuck, so
		// the last evaluate never returns and its frames wait for it.
		busyDone <- e.Run(ctx, loopbackSpec(script(t,
			map[string]any{"action": "navigate", "url": site.URL + "/busy"},
			map[string]any{"action": "evaluate", "name": "one",
				"expression": "setTimeout(() => { const x = new XMLHttpRequest(); x.open('GET', '/spinning', false); x.send(); for (;;) {} }, 0), 1"},
			map[string]any{"action": "evaluate", "name": "never", "expression": "2", "timeout_ms": 60000},
		)))
	}()
	select {
	case <-spinning:
	case r := <-busyDone:
		t.Fatalf("the busy job ended early: %s %s", r.Reason, r.Message)
	}
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site.URL + "/"},
		map[string]any{"action": "screenshot", "name": "shot.png"},
	)))
	mustOK(t, r)
	if c := centre(t, r.Artifacts[0]); c != (color.RGBA{0, 0, 0xcc, 255}) {
		t.Errorf("centre of the page is %v, want #0000cc", c)
	}
	select {
	case r := <-busyDone:
		t.Fatalf("the busy job ended before the other lane's job: %q %s", r.Reason, r.Message)
	default:
	}
	cancel()
	if r := <-busyDone; r.Reason != runtime.ReasonCanceled {
		t.Errorf("busy job: got %s %s, want canceled", r.Reason, r.Message)
	}
}

// TestConcurrentDrawnFramesKeepTheBrowsers: many screenshot jobs on every
// lane at once draw frames concurrently; each lane draws only its own, so
// no browser or GPU process dies (with frames of several tabs in one
// browser, Chromium's viz killed the GPU process on overlapping frames).
func TestConcurrentDrawnFramesKeepTheBrowsers(t *testing.T) {
	e := newExecutor(t, Config{Slots: 2, Prewarm: true})
	url := benchPage(t) + "?x"
	spec := loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": url},
		map[string]any{"action": "screenshot", "name": "shot.png"},
	))
	waitPool(t, e, 2) // both lanes' browsers started
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	start := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 15 {
				if r := run(t, e, spec); !r.OK() || len(r.Artifacts) != 1 {
					mu.Lock()
					failures = append(failures, string(r.Reason)+" "+r.Message)
					mu.Unlock()
				}
			}
		}()
	}
	before := e.browserPIDs()
	var gpus []int
	for _, pid := range before {
		gpus = append(gpus, descendants(pid, "--type=gpu-process")...)
	}
	close(start)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of 30 jobs failed, first: %s", len(failures), failures[0])
	}
	after := e.browserPIDs()
	if slices.Contains(before, 0) || !slices.Equal(before, after) {
		t.Errorf("lane browsers %v before, %v after, want the same running processes", before, after)
	}
	var gpusAfter []int
	for _, pid := range after {
		gpusAfter = append(gpusAfter, descendants(pid, "--type=gpu-process")...)
	}
	slices.Sort(gpus)
	slices.Sort(gpusAfter)
	if len(gpus) == 0 || !slices.Equal(gpus, gpusAfter) {
		t.Errorf("GPU processes %v before, %v after, want the same ones", gpus, gpusAfter)
	}
}
