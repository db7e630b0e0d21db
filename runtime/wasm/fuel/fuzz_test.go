package fuel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// fuzzRuntime is shared by all fuzz iterations: compiling only decodes and
// validates, and the interpreter makes that cheap.
var fuzzRuntime = sync.OnceValue(func() wazero.Runtime {
	cfg := wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(api.CoreFeaturesV2)
	return wazero.NewRuntimeWithConfig(context.Background(), cfg)
})

// compiles reports whether wazero accepts the module, and why not.
func compiles(wasm []byte) error {
	ctx := context.Background()
	cm, err := fuzzRuntime().CompileModule(ctx, wasm)
	if err != nil {
		return err
	}
	return cm.Close(ctx)
}

// safeForWazero reports whether wazero may be handed in: wazero allocates
// from declared counts before reading entries, so a module whose counts
// Instrument's checks did not vouch for could make the fuzzer die of an
// out-of-memory error that is wazero's, not ours.
func safeForWazero(in []byte) bool {
	sections, err := splitSections(in)
	if err != nil {
		return false
	}
	if _, err := analyze(sections); err != nil && !errors.Is(err, ErrReservedName) {
		return false
	}
	for _, s := range sections {
		if s.id == secCustom && s.name == "name" && !keepCustom(s) {
			return false
		}
	}
	return true
}

// FuzzInstrument checks that Instrument never panics, that whatever it
// produces from a module wazero accepts is also accepted, and that it
// accepts every module wazero accepts unless a limit is hit or the module
// uses an encoding we refuse on purpose (errAmbiguous, errSpecStrict,
// errLaterTypes): any
// other module refused only by Instrument would point at a mis-parse.
func FuzzInstrument(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.wasm"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seed modules in testdata: %v", err)
	}
	for _, path := range seeds {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(mod())
	f.Add(oneFunc(0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b))
	f.Add(oneFunc(0x02, 0x40, 0x41, 0x01, 0x04, 0x40, 0x0c, 0x01, 0x05, 0x0f, 0x0b, 0x0b, 0x0b))

	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Instrument(in, Options{})
		if err != nil {
			if out != nil {
				t.Fatal("output returned with an error")
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) &&
				!errors.Is(err, ErrLimit) && !errors.Is(err, ErrReservedName) {
				t.Fatalf("error without a sentinel: %v", err)
			}
		} else if !safeForWazero(out) {
			t.Fatal("Instrument produced a module its own checks refuse")
		}
		if !safeForWazero(in) {
			return
		}
		inErr := compiles(in)
		switch {
		case inErr != nil:
		case err == nil:
			if err := compiles(out); err != nil {
				t.Fatalf("wazero accepts the input but not the instrumented output: %v", err)
			}
		case !errors.Is(err, ErrLimit) && !errors.Is(err, ErrReservedName) &&
			!errors.Is(err, errAmbiguous) && !errors.Is(err, errSpecStrict) && !errors.Is(err, errLaterTypes):
			t.Fatalf("wazero accepts the module but Instrument refused it: %v", err)
		}
	})
}
