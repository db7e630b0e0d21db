package fuel

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// --- a tiny assembler for hand-built modules ---

func u32(v uint32) []byte { return appendU32(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// sec is a section with the given id and the concatenated payload.
func sec(id byte, payload ...[]byte) []byte {
	p := cat(payload...)
	return cat([]byte{id}, u32(uint32(len(p))), p)
}

// vec is a vector: count, then the items.
func vec(items ...[]byte) []byte { return cat(u32(uint32(len(items))), cat(items...)) }

func str(s string) []byte { return cat(u32(uint32(len(s))), []byte(s)) }

// mod is a module with the given sections.
func mod(sections ...[]byte) []byte { return cat(wasmHeader, cat(sections...)) }

// functype is a function type with the given param and result value types.
func functype(params, results []byte) []byte {
	return cat([]byte{0x60}, u32(uint32(len(params))), params, u32(uint32(len(results))), results)
}

// body is a size-prefixed function body with local declarations (already
// encoded as a vector) and code (which must include the final end).
func body(locals []byte, code ...byte) []byte {
	b := cat(locals, code)
	return cat(u32(uint32(len(b))), b)
}

var noLocals = u32(0)

// oneFunc is a module with a single () -> () function exported as "f"
// whose code is given.
func oneFunc(code ...byte) []byte {
	return mod(
		sec(secType, vec(functype(nil, nil))),
		sec(secFunction, vec(u32(0))),
		sec(secExport, vec(cat(str("f"), []byte{0x00}, u32(0)))),
		sec(secCode, vec(body(noLocals, code...))),
	)
}

// --- running modules under wazero ---

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return b
}

func instrument(t testing.TB, wasm []byte) []byte {
	t.Helper()
	out, err := Instrument(wasm, Options{})
	if err != nil {
		t.Fatalf("Instrument: %v", err)
	}
	return out
}

// testCtx bounds every guest run so that a broken instrumentation cannot
// hang the suite; tests assert on fuel, never on time.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// compilationCache keeps wazero's native code across test runs, keyed by
// module bytes and wazero version: compiling the 3–4 MB Go guest is most of
// this suite's time, several times more under -race.
var compilationCache = sync.OnceValue(func() wazero.CompilationCache {
	dir := filepath.Join(os.TempDir(), "palyra-fuel-wazero-cache")
	if c, err := wazero.NewCompilationCacheWithDir(dir); err == nil {
		return c
	}
	return wazero.NewCompilationCache()
})

// newRuntime is a WebAssembly 2.0 runtime with WASI and the "env" fixture
// module that features.wasm imports.
func newRuntime(t testing.TB, ctx context.Context) wazero.Runtime {
	t.Helper()
	cfg := wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2).
		WithCloseOnContextDone(true).
		WithCompilationCache(compilationCache())
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	if _, err := rt.InstantiateWithConfig(ctx, testdata(t, "env.wasm"), wazero.NewModuleConfig().WithName("env")); err != nil {
		t.Fatalf("instantiate env: %v", err)
	}
	return rt
}

func compile(t testing.TB, ctx context.Context, rt wazero.Runtime, wasm []byte) wazero.CompiledModule {
	t.Helper()
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatalf("CompileModule: %v", err)
	}
	return cm
}

// wazeroConfig instantiates an anonymous module without running _start.
func wazeroConfig() wazero.ModuleConfig {
	return wazero.NewModuleConfig().WithName("").WithStartFunctions()
}

// outcome is what one guest run produced.
type outcome struct {
	results   []uint64
	err       error
	remaining int64
	memory    []byte
	stdout    string
}

// runSpec says how to run a guest.
type runSpec struct {
	metered bool
	budget  int64
	fn      string // "" means WASI _start
	params  []uint64
	stdin   string
}

// run instantiates cm afresh and calls one function, following the host
// protocol from the package documentation when spec.metered is set.
func run(t testing.TB, ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule, spec runSpec) outcome {
	t.Helper()
	var stdout bytes.Buffer
	cfg := wazero.NewModuleConfig().WithName("").
		WithStdin(bytes.NewBufferString(spec.stdin)).WithStdout(&stdout).
		WithStartFunctions()
	mod, err := rt.InstantiateModule(ctx, cm, cfg)
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	defer mod.Close(ctx)
	var g api.MutableGlobal
	if spec.metered {
		var ok bool
		g, ok = mod.ExportedGlobal(GlobalExport).(api.MutableGlobal)
		if !ok {
			t.Fatalf("instrumented module has no mutable %s export", GlobalExport)
		}
		g.Set(uint64(spec.budget))
	}
	var o outcome
	if start := mod.ExportedFunction(StartExport); spec.metered && start != nil {
		_, o.err = start.Call(ctx)
	}
	if o.err == nil {
		name := spec.fn
		if name == "" {
			name = "_start"
		}
		f := mod.ExportedFunction(name)
		if f == nil {
			t.Fatalf("no export %q", name)
		}
		o.results, o.err = f.Call(ctx, spec.params...)
		var exit *sys.ExitError
		if errors.As(o.err, &exit) && exit.ExitCode() == 0 {
			o.err = nil
		}
	}
	if g != nil {
		o.remaining = int64(g.Get())
	}
	if m := mod.ExportedMemory("memory"); m != nil {
		b, _ := m.Read(0, m.Size())
		o.memory = bytes.Clone(b)
	}
	o.stdout = stdout.String()
	return o
}

// pair compiles a module both as is and instrumented, in one runtime.
type pair struct {
	ctx            context.Context
	rt             wazero.Runtime
	plain, metered wazero.CompiledModule
}

func newPair(t testing.TB, wasm []byte) *pair {
	t.Helper()
	ctx := testCtx(t)
	rt := newRuntime(t, ctx)
	return &pair{ctx: ctx, rt: rt, plain: compile(t, ctx, rt, wasm), metered: compile(t, ctx, rt, instrument(t, wasm))}
}

// unmetered runs fn on the original module.
func (p *pair) unmetered(t testing.TB, spec runSpec) outcome {
	t.Helper()
	spec.metered = false
	return run(t, p.ctx, p.rt, p.plain, spec)
}

// meter runs fn on the instrumented module with the given budget.
func (p *pair) meter(t testing.TB, budget int64, spec runSpec) outcome {
	t.Helper()
	spec.metered, spec.budget = true, budget
	return run(t, p.ctx, p.rt, p.metered, spec)
}

// big is a budget no test guest exhausts.
const big = int64(1) << 60

// used runs fn metered with a big budget, requires success, and returns
// the fuel it used.
func (p *pair) used(t testing.TB, spec runSpec) int64 {
	t.Helper()
	o := p.meter(t, big, spec)
	if o.err != nil {
		t.Fatalf("%s%v: %v", spec.fn, spec.params, o.err)
	}
	return Used(big, o.remaining)
}
