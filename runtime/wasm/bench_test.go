package wasm

import (
	"context"
	"testing"

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
