package wasm

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

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

// meterGuard is a run's fuel global, read and written by the host under a
// lock (the guest's own reads and writes are machine code, outside Go's
// memory model and the race detector).
type meterGuard struct {
	mu      sync.Mutex
	g       api.MutableGlobal
	drained bool
	left    int64 // the fuel left when the run was first drained
}

// get is the fuel left; for a drained run, what was left when it was
// stopped (the drain itself is not the guest's consumption).
func (m *meterGuard) get() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drained {
		return m.left
	}
	return int64(m.g.Get())
}

// drain empties the fuel: the guest traps at its next fuel check.
func (m *meterGuard) drain() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.drained {
		m.drained, m.left = true, int64(m.g.Get())
	}
	m.g.Set(0)
}

// drainInterval is how often a stopped run's fuel is emptied again until
// the guest notices: its own read-modify-write of the global may have
// overwritten the previous drain.
const drainInterval = time.Millisecond

// drainOnDone stops a metered run when ctx ends (deadline, cancellation,
// output limit, executor closing) by draining its fuel, again every
// drainInterval until the run returns: the guest traps at its next block,
// call-free loops included, and the run's context says why. stop ends it.
func drainOnDone(ctx context.Context, m *meterGuard) (stop func()) {
	done := make(chan struct{})
	var mu sync.Mutex
	stopped := false
	var running chan struct{}
	unhook := context.AfterFunc(ctx, func() { // on its own goroutine
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		running = make(chan struct{})
		defer close(running)
		mu.Unlock()
		t := time.NewTicker(drainInterval)
		defer t.Stop()
		for {
			m.drain()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() {
		unhook()
		mu.Lock()
		stopped = true
		r := running
		mu.Unlock()
		close(done)
		if r != nil {
			<-r
		}
	}
}
