package browser

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// benchPage is a small page with some text and colour.
func benchPage(b testing.TB) string {
	return newCountingServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		html(w, `<h1 style="background:#fc0">Benchmark</h1><p>`+fmt.Sprint(time.Now().UnixNano())+`</p>`)
	})).URL + "/"
}

// BenchmarkScreenshotWarm is one job (new browser context, navigate,
// viewport screenshot, dispose) on an executor whose browser is running.
// Compare with BenchmarkColdCLI, which starts Chromium per screenshot.
func BenchmarkScreenshotWarm(b *testing.B) {
	e := newExecutor(b, Config{})
	spec := loopbackSpec(script(b,
		map[string]any{"action": "navigate", "url": benchPage(b)},
		map[string]any{"action": "screenshot", "name": "shot.png"},
	))
	var lat latencies
	for b.Loop() {
		t0 := time.Now()
		r := e.Run(context.Background(), spec)
		lat = append(lat, time.Since(t0))
		if !r.OK() || len(r.Artifacts) != 1 {
			b.Fatalf("job failed: %s %s", r.Reason, r.Message)
		}
	}
	lat.report(b)
}

// latencies records per-iteration times for p50/p99 metrics.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	pct := func(p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkColdCLI runs `chromium-headless-shell --screenshot` once per
// iteration: the cost of a browser start per job.
func BenchmarkColdCLI(b *testing.B) {
	path := requireChromium(b)
	url := benchPage(b)
	dir := b.TempDir()
	out := filepath.Join(dir, "shot.png")
	args := []string{"--headless", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--window-size=1280,800", "--screenshot=" + out}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox")
	}
	var lat latencies
	for b.Loop() {
		t0 := time.Now()
		os.Remove(out)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, path, append(args, "--user-data-dir="+b.TempDir(), url)...)
		msg, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			b.Fatalf("%s: %v\n%s", path, err, msg)
		}
		if st, err := os.Stat(out); err != nil || st.Size() == 0 {
			b.Fatalf("no screenshot written: %v\n%s", err, msg)
		}
		lat = append(lat, time.Since(t0))
	}
	lat.report(b)
}
