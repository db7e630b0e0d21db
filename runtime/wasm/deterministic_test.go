package wasm

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime"
)

// A Go guest that reads the clock, sleeps and draws random numbers gives
// bit-identical stdout, stderr and fuel in deterministic mode, on runs in
// parallel under load, and its sleep costs no real time; in the default
// mode it sleeps in real time and every run differs.
func TestDeterministicRunsAreBitIdentical(t *testing.T) {
	e := newExecutor(t, Config{MaxConcurrent: 4})
	mod := testwasm.Build(t, "clockrand")
	spec := runtime.Spec{Module: mod, Input: []byte("2s"), Deterministic: true, Timeout: time.Minute}

	const runs = 20
	results := make([]runtime.Result, runs)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.Run(context.Background(), spec)
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	first := results[0]
	if !first.OK() {
		t.Fatalf("deterministic run: %s %s\n%s", first.Reason, first.Message, first.Stderr)
	}
	for i, r := range results {
		if string(r.Stdout) != string(first.Stdout) || string(r.Stderr) != string(first.Stderr) || r.FuelUsed != first.FuelUsed {
			t.Fatalf("run %d differs:\n%s%s fuel %d\nvs\n%s%s fuel %d", i, r.Stdout, r.Stderr, r.FuelUsed, first.Stdout, first.Stderr, first.FuelUsed)
		}
	}
	if !strings.HasPrefix(string(first.Stdout), "now 2000-01-01T00:00:00") || !strings.Contains(string(first.Stdout), "(asked 2s)") {
		t.Fatalf("unexpected output:\n%s", first.Stdout)
	}
	if took > 20*time.Second {
		t.Errorf("20 deterministic runs that each 'sleep' 2s took %s: sleeps should be virtual", took)
	}
	t.Logf("deterministic output (fuel %d):\n%s", first.FuelUsed, first.Stdout)

	// Another input: another seed, another output.
	other := e.Run(context.Background(), runtime.Spec{Module: mod, Input: []byte("3s"), Deterministic: true})
	if !other.OK() || string(other.Stdout) == string(first.Stdout) {
		t.Fatalf("another input gave the same output: %s", other.Stdout)
	}

	// The default mode: real time, real randomness.
	t1 := time.Now()
	a := e.Run(context.Background(), runtime.Spec{Module: mod, Input: []byte("300ms")})
	if took := time.Since(t1); took < 300*time.Millisecond {
		t.Fatalf("a default-mode run that sleeps 300ms took %s", took)
	}
	b := e.Run(context.Background(), runtime.Spec{Module: mod, Input: []byte("300ms")})
	if !a.OK() || !b.OK() || string(a.Stdout) == string(b.Stdout) {
		t.Fatalf("two default-mode runs printed the same:\n%s", a.Stdout)
	}

	// Deterministic mode needs metering.
	u := newExecutor(t, Config{unmetered: true})
	if r := u.Run(context.Background(), spec); r.OK() || !strings.Contains(r.Message, "metering") {
		t.Fatalf("unmetered deterministic run: %s %s", r.Reason, r.Message)
	}
}
