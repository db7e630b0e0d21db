package wasm

import (
	"context"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime"
)

// BenchmarkTrivialJob measures the executor's per-job overhead with a warm
// cache: slot, cache lookup, instantiate, _start that returns at once,
// classification.
func BenchmarkTrivialJob(b *testing.B) {
	benchmarkJob(b, runtime.Spec{Module: trivialModule, ModuleHash: sha(trivialModule)})
}

// BenchmarkGoReverseJob is the same for a real Go guest (a ~2.6 MB module
// whose runtime initialises before main), reversing a short input.
func BenchmarkGoReverseJob(b *testing.B) {
	mod := testwasm.Build(b, "reverse")
	benchmarkJob(b, runtime.Spec{Module: mod, ModuleHash: sha(mod), Input: []byte("hello, benchmark")})
}

func benchmarkJob(b *testing.B, spec runtime.Spec) {
	e := newExecutor(b, Config{})
	ctx := context.Background()
	if res := e.Run(ctx, spec); !res.OK() { // warm the cache
		b.Fatalf("warm-up run: %s %s", res.Reason, res.Message)
	}
	b.ReportAllocs()
	for b.Loop() {
		if res := e.Run(ctx, spec); !res.OK() {
			b.Fatalf("run: %s %s", res.Reason, res.Message)
		}
	}
}

// BenchmarkMeteredRatio runs the fuel package's CPU-bound C guest (sort
// 50,000 numbers) through a metered and an unmetered executor, alternating
// in one loop so both see the same machine load, and reports the ratio.
func BenchmarkMeteredRatio(b *testing.B) {
	spec := runtime.Spec{Module: cwasi(b), Input: []byte("50000\n")}
	metered := newExecutor(b, Config{})
	unmetered := newExecutor(b, Config{unmetered: true})
	ctx := context.Background()
	var tm, tu time.Duration
	var fuelUsed uint64
	for b.Loop() {
		rm := metered.Run(ctx, spec)
		ru := unmetered.Run(ctx, spec)
		if !rm.OK() || !ru.OK() || string(rm.Stdout) != string(ru.Stdout) {
			b.Fatalf("metered %s %q, unmetered %s %q", rm.Message, rm.Stdout, ru.Message, ru.Stdout)
		}
		tm += rm.Duration
		tu += ru.Duration
		fuelUsed = rm.FuelUsed
	}
	b.ReportMetric(float64(tm.Microseconds())/float64(b.N), "metered-µs/job")
	b.ReportMetric(float64(tu.Microseconds())/float64(b.N), "unmetered-µs/job")
	b.ReportMetric(float64(tm)/float64(tu), "ratio")
	b.ReportMetric(float64(fuelUsed), "fuel/job")
}

// BenchmarkTrivialJobUnmetered is BenchmarkTrivialJob without fuel
// metering: the difference is what setting the budget, reading it back
// and the per-block checks of an empty _start cost.
func BenchmarkTrivialJobUnmetered(b *testing.B) {
	e := newExecutor(b, Config{unmetered: true})
	spec := runtime.Spec{Module: trivialModule, ModuleHash: sha(trivialModule)}
	ctx := context.Background()
	if res := e.Run(ctx, spec); !res.OK() {
		b.Fatalf("warm-up run: %s %s", res.Reason, res.Message)
	}
	b.ReportAllocs()
	for b.Loop() {
		if res := e.Run(ctx, spec); !res.OK() {
			b.Fatalf("run: %s %s", res.Reason, res.Message)
		}
	}
}

// BenchmarkGrantedJob is the per-job cost of a run with grants (policy
// and host state built, nothing called) on the trivial module.
func BenchmarkGrantedJob(b *testing.B) {
	benchmarkJob(b, runtime.Spec{Module: trivialModule, ModuleHash: sha(trivialModule),
		AllowHosts: []string{"example.com", "api.example.org"},
		Grants:     &runtime.Grants{SecretNames: []string{"a", "b"}, Secrets: memSecrets{}, KVPrefix: "jobs/x/", KV: newMemKV()}})
}
