package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// result is one concurrency level's figures; it is also the JSON shape
// written by -out (see DESIGN.md, "etcd baseline").
type result struct {
	Clients    int     `json:"clients"`
	PutsPerSec float64 `json:"puts_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	Puts       int     `json:"puts"`
	Errors     int     `json:"errors"`
	Seconds    float64 `json:"seconds"`
}

type loadConfig struct {
	endpoints []string
	clients   int
	warmup    time.Duration
	duration  time.Duration
	valueSize int
	keys      int // keys per client; each client cycles through its own
}

// clientStats is what one closed-loop client saw inside the window.
type clientStats struct {
	lat    []time.Duration
	errors int
}

// runLoad runs cfg.clients closed loops, each with its own gRPC client
// connected to one member (client i to member i mod n), each doing one Put,
// waiting for the reply and repeating. Only Puts that complete inside the
// measurement window (after the warm-up) are counted; throughput is that
// count over the window's length.
func runLoad(ctx context.Context, cfg loadConfig) (result, error) {
	cls := make([]*clientv3.Client, 0, cfg.clients)
	defer func() {
		for _, cl := range cls {
			cl.Close()
		}
	}()
	for i := range cfg.clients {
		cl, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{cfg.endpoints[i%len(cfg.endpoints)]},
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return result{}, fmt.Errorf("client %d: %w", i, err)
		}
		cls = append(cls, cl)
	}
	value := make([]byte, cfg.valueSize)
	rand.Read(value)
	val := string(value)

	start := time.Now()
	winStart := start.Add(cfg.warmup)
	winEnd := winStart.Add(cfg.duration)
	stats := make([]clientStats, cfg.clients)
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Go(func() {
			st := &stats[i]
			st.lat = make([]time.Duration, 0, 4096)
			prefix := fmt.Sprintf("palyra-bench/c%03d/", i)
			for n := 0; ctx.Err() == nil; n++ {
				key := fmt.Sprintf("%s%06d", prefix, n%cfg.keys)
				t0 := time.Now()
				if t0.After(winEnd) {
					return
				}
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := cl.Put(pctx, key, val)
				cancel()
				t1 := time.Now()
				inWindow := !t1.Before(winStart) && t1.Before(winEnd)
				switch {
				case err != nil && ctx.Err() != nil:
					return
				case err != nil:
					if inWindow {
						st.errors++
					}
					time.Sleep(10 * time.Millisecond)
				case inWindow:
					st.lat = append(st.lat, t1.Sub(t0))
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	var all []time.Duration
	r := result{Clients: cfg.clients, Seconds: cfg.duration.Seconds()}
	for _, st := range stats {
		all = append(all, st.lat...)
		r.Errors += st.errors
	}
	if len(all) == 0 {
		return r, errors.New("no Put succeeded in the measurement window")
	}
	slices.Sort(all)
	r.Puts = len(all)
	r.PutsPerSec = float64(len(all)) / cfg.duration.Seconds()
	r.P50Ms = ms(percentile(all, 50))
	r.P99Ms = ms(percentile(all, 99))
	return r, nil
}

// percentile of sorted samples, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
