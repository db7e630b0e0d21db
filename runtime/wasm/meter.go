package wasm

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm/fuel"
	"github.com/tetratelabs/wazero/api"
)

// cacheSuffix is the part of compiled-module cache keys after the module
// hash: it names every transformation the compiled code went through.
func (cfg Config) cacheSuffix() string {
	m := "fuel" + strconv.Itoa(fuel.Version)
	if cfg.unmetered {
		m = "unmetered"
	}
	return cfg.TransformVersion + "/" + m
}

// meter adds fuel metering to a module that passed scanModule. fuel checks
// every section's counts as well, so its output is safe for wazero's
// decoder in that respect (see fuel's DESIGN.md); the executor scans the
// output again anyway before compiling it.
func meter(module []byte) ([]byte, error) {
	out, err := fuel.Instrument(module, fuel.Options{})
	if err == nil {
		return out, nil
	}
	msg := strings.TrimPrefix(firstLine(err.Error()), "fuel: ")
	switch {
	case errors.Is(err, fuel.ErrUnsupported):
		return nil, invalid("build for WebAssembly 2.0 without threads, tail calls, exceptions or GC (the defaults of GOOS=wasip1 and clang --target=wasm32-wasi)",
			"module cannot be metered: %s", msg)
	case errors.Is(err, fuel.ErrLimit):
		return nil, invalid("make the module smaller (strip unused code, or split the job)",
			"module exceeds an implementation limit %s", strings.TrimPrefix(msg, fuel.ErrLimit.Error()+" "))
	case errors.Is(err, fuel.ErrReservedName):
		return nil, invalid("", "module cannot be metered: %s (names starting with palyra_ are reserved)", msg)
	case errors.Is(err, fuel.ErrMalformed):
		return nil, invalid("the file may be corrupt or truncated; rebuild it ("+buildHint+")",
			"module is malformed %s", strings.TrimPrefix(msg, fuel.ErrMalformed.Error()+" "))
	}
	return nil, err
}

// budgetFor is a Spec's fuel budget as the fuel global holds it.
func (e *Executor) budgetFor(spec runtime.Spec) int64 {
	f := spec.Fuel
	if f == 0 {
		f = e.cfg.DefaultFuel
	}
	return int64(min(f, math.MaxInt64))
}

// fuelGlobal is the budget global of an instantiated metered module.
func fuelGlobal(mod api.Module) (api.MutableGlobal, error) {
	g, ok := mod.ExportedGlobal(fuel.GlobalExport).(api.MutableGlobal)
	if !ok {
		return nil, errors.New("metered module has no mutable " + fuel.GlobalExport + " global")
	}
	return g, nil
}

// fuelUsed is what a run cost, at most its budget: the check that trips
// has charged a whole block ahead, which the job never got to run.
func fuelUsed(budget, remaining int64) uint64 {
	return uint64(min(max(fuel.Used(budget, remaining), 0), budget))
}

// meterGuard is a run's fuel global as the host reads it (the virtual
// clock of a deterministic run), from the guest's own goroutine.
type meterGuard struct {
	g api.MutableGlobal
}

func (m *meterGuard) get() int64 { return int64(m.g.Get()) }
