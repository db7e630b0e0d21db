package wasm

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
)

// FuzzValidate feeds arbitrary bytes to Validate and, when a module passes,
// to Run under tight limits. Neither may panic; Validate may only refuse
// with a *ModuleError; Run must end with a known reason and a one-line
// message.
func FuzzValidate(f *testing.F) {
	for _, seed := range [][]byte{
		nil, []byte("garbage"), []byte("\x00asm"), []byte("\x00asm\x01\x00\x00\x00"),
		trivialModule, unreachableModule, recursionModule, outOfBoundsModule,
		loopModule, growModule(2, true), procExitModule(3), tableGrowModule(5),
		writeModule(1, "seed", false, 0), sleepModule(1e6),
		// palyra_v1 calls (no grants while fuzzing: nothing leaves the host)
		hostCallModule(abi.FnSecretGet, []int32{100, 9, 200, 16}, i64, int32(abi.CodeNoGrant)),
		hostCallModule(abi.FnHTTPFetch, []int32{0, int32(len(fetchSeed)), 100, 1000}, i64, int32(abi.CodeNoGrant), testData{0, fetchSeed}),
		hostCallModule(abi.FnLastError, []int32{0, 100}, i32, 0),
	} {
		f.Add(seed)
	}
	reverse := testwasm.Build(f, "reverse")
	f.Add(reverse)
	f.Add(reverse[:4096])

	// While fuzzing, no CacheDir: workers may be killed and must not leave
	// files behind. As a plain test, share the package's cache.
	cfg := Config{MaxCachedModules: 8}
	if fuzzing() {
		cfg.CacheDir = ""
	} else {
		cfg.CacheDir = sharedCacheDir
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close(context.Background()) })

	for _, s := range []string{"spin", "membomb", "fail"} {
		f.Add(testwasm.Build(f, s))
	}
	known := map[runtime.Reason]bool{
		runtime.ReasonNone: true, runtime.ReasonTimeout: true, runtime.ReasonMemoryLimit: true,
		runtime.ReasonOutputLimit: true, runtime.ReasonTrap: true, runtime.ReasonExitCode: true,
		runtime.ReasonInvalidModule: true, runtime.ReasonOutOfFuel: true,
	}
	fuzzing := fuzzing()
	f.Fuzz(func(t *testing.T, module []byte) {
		if fuzzing && len(module) > maxFuzzCompile {
			// Compiling a mutated 2.6 MB Go guest takes seconds under
			// coverage instrumentation and the fuzzer takes it for a hang;
			// the scanner is what big inputs exercise. Seeds still run in
			// full as plain tests.
			if checkHeader(module) == nil {
				_, _ = scanModule(module)
			}
			return
		}
		err := e.Validate(context.Background(), module)
		if err != nil {
			var merr *ModuleError
			if !errors.As(err, &merr) {
				t.Fatalf("Validate = %v (%T), want *ModuleError", err, err)
			}
			if merr.Message == "" || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Validate error %q is empty or spans lines", err)
			}
			return
		}
		res := e.Run(context.Background(), runtime.Spec{
			Module: module, Timeout: 20 * time.Millisecond, MemoryLimit: 1 << 20, MaxOutput: 1024, Fuel: 1_000_000,
		})
		if !known[res.Reason] {
			t.Fatalf("Run of a valid module ended with %q: %s", res.Reason, res.Message)
		}
		if strings.Contains(res.Message, "\n") || (res.Reason != runtime.ReasonNone && res.Message == "") {
			t.Fatalf("Run message %q is empty or spans lines", res.Message)
		}
	})
}

// fetchSeed is an encoded request for a host no fuzzed job is granted.
var fetchSeed = abi.AppendRequest(nil, abi.Request{URL: "http://127.0.0.1/"})

// maxFuzzCompile is the largest input FuzzValidate compiles while fuzzing.
const maxFuzzCompile = 64 << 10

// fuzzing reports whether the test binary runs with -test.fuzz.
func fuzzing() bool {
	fl := flag.Lookup("test.fuzz")
	return fl != nil && fl.Value.String() != ""
}
