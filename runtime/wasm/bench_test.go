package wasm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
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

// BenchmarkDeterministicOverhead runs a Go guest that reads the clock and
// draws random numbers (examples/clockrand, no sleep) in the default and
// the deterministic mode, alternating, and reports the ratio of their
// mean run times.
func BenchmarkDeterministicOverhead(b *testing.B) {
	mod := testwasm.Build(b, "clockrand")
	e := newExecutor(b, Config{})
	ctx := context.Background()
	def := runtime.Spec{Module: mod, ModuleHash: sha(mod), Input: []byte("0s")}
	det := def
	det.Deterministic = true
	e.Run(ctx, def) // compile
	var td, tv time.Duration
	for b.Loop() {
		rd, rv := e.Run(ctx, def), e.Run(ctx, det)
		if !rd.OK() || !rv.OK() {
			b.Fatalf("default %s, deterministic %s", rd.Message, rv.Message)
		}
		td += rd.Duration
		tv += rv.Duration
	}
	b.ReportMetric(float64(td.Microseconds())/float64(b.N), "default-µs/job")
	b.ReportMetric(float64(tv.Microseconds())/float64(b.N), "deterministic-µs/job")
	b.ReportMetric(float64(tv)/float64(td), "ratio")
}

// BenchmarkCGuestNativeRatio builds testdata/cpu.c (a heap sort and a
// sieve over 1,000,000 numbers, no libc in its hot loops) twice with
// clang -O2: natively and for wasm32-wasi. It runs them alternately, the
// wasm one metered under Palyra, and reports metered/native wall time.
// Both print the same line. make bench installs clang, lld and wasi-libc.
func BenchmarkCGuestNativeRatio(b *testing.B) {
	if _, err := exec.LookPath("clang"); err != nil {
		b.Skip("no clang: apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32 (make bench does)")
	}
	dir := b.TempDir()
	native, wasmPath := filepath.Join(dir, "cpu"), filepath.Join(dir, "cpu.wasm")
	for _, args := range [][]string{
		{"-O2", "-o", native, "testdata/cpu.c"},
		{"--target=wasm32-wasi", "-O2", "-o", wasmPath, "testdata/cpu.c"},
	} {
		if out, err := exec.Command("clang", args...).CombinedOutput(); err != nil {
			b.Skipf("clang %v: %v\n%s(for wasm32-wasi: apt-get install -y lld wasi-libc libclang-rt-14-dev-wasm32)", args, err, out)
		}
	}
	mod, err := os.ReadFile(wasmPath)
	if err != nil {
		b.Fatal(err)
	}
	e := newExecutor(b, Config{})
	ctx := context.Background()
	input := []byte("1000000\n")
	spec := runtime.Spec{Module: mod, Input: input, Timeout: time.Minute, MemoryLimit: 256 << 20}
	e.Run(ctx, spec) // compile
	var tw, tn time.Duration
	var fuel uint64
	for b.Loop() {
		r := e.Run(ctx, spec)
		t0 := time.Now()
		cmd := exec.Command(native)
		cmd.Stdin = bytes.NewReader(input)
		out, err := cmd.Output()
		tn += time.Since(t0)
		if !r.OK() || err != nil || string(out) != string(r.Stdout) {
			b.Fatalf("wasm %s %q, native %v %q", r.Message, r.Stdout, err, out)
		}
		tw += r.Duration
		fuel = r.FuelUsed
	}
	b.ReportMetric(float64(tw.Milliseconds())/float64(b.N), "metered-ms/job")
	b.ReportMetric(float64(tn.Milliseconds())/float64(b.N), "native-ms/job")
	b.ReportMetric(float64(tw)/float64(tn), "ratio")
	b.ReportMetric(float64(fuel), "fuel/job")
}
