package fuel

import (
	"context"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// benchIterations is the argument to bench.wasm's run: enough work per call
// (a few ms) that call overhead does not blur the metering cost.
const benchIterations = 20

// benchGuest compiles testdata/bench.wasm (instrumented when metered) with
// wazero's optimizing compiler and returns its run function and, when
// metered, the fuel global.
func benchGuest(b *testing.B, metered bool) (api.Function, api.MutableGlobal) {
	b.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	b.Cleanup(func() { _ = rt.Close(ctx) })
	wasm := testdata(b, "bench.wasm")
	if metered {
		wasm = instrument(b, wasm)
	}
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		b.Fatal(err)
	}
	var g api.MutableGlobal
	if metered {
		g = mod.ExportedGlobal(GlobalExport).(api.MutableGlobal)
	}
	return mod.ExportedFunction("run"), g
}

func benchRun(b *testing.B, metered bool) {
	fn, g := benchGuest(b, metered)
	ctx := context.Background()
	var used int64
	b.ResetTimer()
	for b.Loop() {
		if g != nil {
			g.Set(uint64(big))
		}
		if _, err := fn.Call(ctx, benchIterations); err != nil {
			b.Fatal(err)
		}
		if g != nil {
			used = Used(big, int64(g.Get()))
		}
	}
	if metered {
		b.ReportMetric(float64(used), "fuel/op")
	}
}

// BenchmarkUnmetered runs the CPU-bound C guest as compiled.
func BenchmarkUnmetered(b *testing.B) { benchRun(b, false) }

// BenchmarkMetered runs the same guest instrumented; compare its ns/op with
// BenchmarkUnmetered's from the same run.
func BenchmarkMetered(b *testing.B) { benchRun(b, true) }

// BenchmarkInstrument measures the transform itself on the C WASI guest.
func BenchmarkInstrument(b *testing.B) {
	wasm := testdata(b, "cwasi.wasm")
	b.SetBytes(int64(len(wasm)))
	for b.Loop() {
		if _, err := Instrument(wasm, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMeteredRatio alternates metered and unmetered calls in one loop,
// so that load from other processes hits both alike, and reports their
// ratio (the design goal is ≤ 1.3 on CPU-bound code).
func BenchmarkMeteredRatio(b *testing.B) {
	plain, _ := benchGuest(b, false)
	metered, g := benchGuest(b, true)
	ctx := context.Background()
	var tPlain, tMetered time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := plain.Call(ctx, benchIterations); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		g.Set(uint64(big))
		if _, err := metered.Call(ctx, benchIterations); err != nil {
			b.Fatal(err)
		}
		tMetered += time.Since(mid)
		tPlain += mid.Sub(start)
	}
	b.ReportMetric(float64(tPlain.Nanoseconds())/float64(b.N), "unmetered-ns/op")
	b.ReportMetric(float64(tMetered.Nanoseconds())/float64(b.N), "metered-ns/op")
	b.ReportMetric(float64(tMetered)/float64(tPlain), "ratio")
}
