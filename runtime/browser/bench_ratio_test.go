package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// BenchmarkWarmVsCold measures, in one run, a screenshot job on the warm
// pool against a cold `chromium-headless-shell --screenshot` of the same
// page (alternating, so machine noise hits both), and the jobs/s one
// worker sustains with all its slots busy.
func BenchmarkWarmVsCold(b *testing.B) {
	path := requireChromium(b)
	e := newExecutor(b, Config{Slots: 2, Prewarm: true})
	url := benchPage(b)
	spec := loopbackSpec(script(b,
		map[string]any{"action": "navigate", "url": url},
		map[string]any{"action": "screenshot", "name": "shot.png"},
	))
	out := filepath.Join(b.TempDir(), "shot.png")
	args := []string{"--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--window-size=1280,800", "--screenshot=" + out}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox")
	}
	e.Run(context.Background(), spec) // warm the pool
	var warm, cold latencies
	for b.Loop() {
		t0 := time.Now()
		if r := e.Run(context.Background(), spec); !r.OK() {
			b.Fatalf("warm job: %s %s", r.Reason, r.Message)
		}
		warm = append(warm, time.Since(t0))
		t0 = time.Now()
		os.Remove(out)
		cmd := exec.Command(path, append(args, "--user-data-dir="+b.TempDir(), url)...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("cold: %v\n%s", err, msg)
		}
		cold = append(cold, time.Since(t0))
	}
	warm.report(b)
	b.ReportMetric(median(cold), "cold-p50-ms")
	b.ReportMetric(median(cold)/median(warm), "cold/warm")
	b.ReportMetric(median(warm)/median(cold), "warm/cold-target≤0.15")

	// Throughput of one worker: 2 slots, 2 submitters, fixed job count.
	const jobs = 20
	var wg sync.WaitGroup
	ch := make(chan struct{}, jobs)
	for i := 0; i < jobs; i++ {
		ch <- struct{}{}
	}
	close(ch)
	t0 := time.Now()
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range ch {
				e.Run(context.Background(), spec)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(jobs/time.Since(t0).Seconds(), "jobs/s/worker")
}

func median(l latencies) float64 {
	c := append(latencies(nil), l...)
	if len(c) == 0 {
		return 0
	}
	for i := 1; i < len(c); i++ {
		for j := i; j > 0 && c[j] < c[j-1]; j-- {
			c[j], c[j-1] = c[j-1], c[j]
		}
	}
	return float64(c[len(c)/2].Microseconds()) / 1000
}
