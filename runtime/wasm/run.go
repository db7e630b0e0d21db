package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm/fuel"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// errTimeout is the cause of a run's context when its wall-clock limit ends it.
var errTimeout = errors.New("wall-clock limit reached")

// outputLimitError is the cause of a run's context when a stream overflowed.
type outputLimitError struct{ stream string }

func (e *outputLimitError) Error() string { return e.stream + " exceeded its bound" }

// limits are a Spec's limits with the executor's defaults filled in.
type limits struct {
	timeout   time.Duration
	memory    uint64
	maxOutput int
	fuel      int64 // budget; ignored when the executor is unmetered
	// defaultFuel says fuel is the executor's default (the Spec had none);
	// defaultBudget is that default.
	defaultFuel   bool
	defaultBudget int64
	tap           *runtime.Tap
	// deterministic runs on a virtual clock and seeded randomness; seed
	// is the generator's seed.
	deterministic bool
	seed          [32]byte
}

func (e *Executor) limitsFor(spec runtime.Spec) limits {
	l := limits{timeout: spec.Timeout, memory: spec.MemoryLimit, maxOutput: spec.MaxOutput, fuel: e.budgetFor(spec), tap: spec.Tap,
		defaultFuel: spec.Fuel == 0, defaultBudget: e.budgetFor(runtime.Spec{})}
	if l.timeout <= 0 {
		l.timeout = e.cfg.DefaultTimeout
	}
	if l.memory == 0 {
		l.memory = e.cfg.DefaultMemoryLimit
	}
	if l.maxOutput <= 0 {
		l.maxOutput = e.cfg.DefaultMaxOutput
	}
	return l
}

// Run implements runtime.Executor: it waits for a free slot, compiles (or
// finds) the module, and runs it under the Spec's limits and grants: it
// sets the fuel budget, calls palyra_start (a former start section) if
// there is one, then _start. The timeout covers instantiation and
// execution, not the wait for a slot or the shared compilation. Run never
// panics; every failure is a Result.
func (e *Executor) Run(ctx context.Context, spec runtime.Spec) runtime.Result {
	res, _ := e.run(ctx, spec, false)
	return res
}

// RunCached implements runtime.ModuleCache: it is Run for a Spec that names
// its module by ModuleHash alone, when that module is compiled (or was
// refused) already. ok is false, and nothing ran, when the cache does not
// hold it; then call Run with the module's bytes.
func (e *Executor) RunCached(ctx context.Context, spec runtime.Spec) (runtime.Result, bool) {
	return e.run(ctx, spec, true)
}

// run is Run; with cachedOnly it uses only a module already in the cache
// and reports ran=false without doing anything when there is none.
func (e *Executor) run(ctx context.Context, spec runtime.Spec, cachedOnly bool) (res runtime.Result, ran bool) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("wasm run panicked", "panic", r)
			res, ran = runtime.Result{Reason: runtime.ReasonInternal, Message: fmt.Sprintf("executor panicked: %v", r)}, true
		}
		res.Duration = time.Since(start)
	}()
	if !e.enter() {
		return failed(runtime.ReasonInternal, "the wasm executor is shut down"), true
	}
	defer e.runs.Done()

	var cm *compiledModule
	if cachedOnly {
		// Pinned before waiting for a slot, so eviction cannot take it.
		if !validHash(spec.ModuleHash) {
			return runtime.Result{}, false
		}
		if cm = e.modules.pinCached(spec.ModuleHash + "/" + e.cfg.cacheSuffix()); cm == nil {
			return runtime.Result{}, false
		}
		defer e.modules.release(cm)
	}
	res, missed := e.runLoaded(ctx, spec, cm, cachedOnly)
	if missed {
		return runtime.Result{}, false
	}
	return res, true
}

// runLoaded runs spec with cm, or with the module it loads from
// spec.Module when cm is nil. cm may still be compiling: the run waits for
// it in its slot. missed reports that cm's compile failed for a reason of
// its own (not a verdict on the module): nothing ran, and a run without
// the module's bytes (cached) should be made again with them.
func (e *Executor) runLoaded(ctx context.Context, spec runtime.Spec, cm *compiledModule, cached bool) (res runtime.Result, missed bool) {
	if cm != nil {
		select {
		case <-cm.ready: // a refusal is known before a slot is taken
			if cm.err != nil {
				var merr *ModuleError
				if !errors.As(cm.err, &merr) {
					return runtime.Result{}, cached
				}
				return loadFailure(ctx, cm.err), false
			}
		default:
			if spec.NoWait { // still compiling: nothing runs now
				return failed(runtime.ReasonBusy, "the module is still compiling"), false
			}
		}
	}

	host, err := e.newHostState(spec)
	if err != nil {
		return failed(runtime.ReasonBlocked, "invalid job grants: "+err.Error()), false
	}
	defer host.close()

	if spec.NoWait {
		if !e.slots.tryAcquire() {
			return failed(runtime.ReasonBusy, "no free slot"), false
		}
		if spec.Queued != nil {
			spec.Queued()
		}
	} else if err := e.slots.acquire(ctx, e.life.Done(), spec.Order, spec.Queued); err != nil {
		if e.life.Err() != nil {
			return failed(runtime.ReasonInternal, "the wasm executor is shut down"), false
		}
		return failed(runtime.ReasonCanceled, "canceled while waiting for a free slot"), false
	}
	defer e.slots.release()

	slotAt := time.Now()
	defer func() { res.Ran = time.Since(slotAt) }()
	if spec.Tap != nil && !spec.Tap.Start() {
		return failed(runtime.ReasonCanceled, "withdrawn while it waited for a slot"), false
	}

	lim := e.limitsFor(spec)
	if cm == nil {
		if cm, err = e.load(ctx, spec.Module, spec.ModuleHash); err != nil {
			return loadFailure(ctx, err), false
		}
		defer e.modules.release(cm)
	} else {
		select { // the compile it joined, in order, in its slot
		case <-cm.ready:
		case <-ctx.Done():
			return loadFailure(ctx, context.Cause(ctx)), false
		}
		if cm.err != nil {
			var merr *ModuleError
			if !errors.As(cm.err, &merr) {
				return runtime.Result{}, cached // the compile failed, not the module: run again with its bytes
			}
			return loadFailure(ctx, cm.err), false
		}
	}

	if spec.Deterministic {
		if e.cfg.unmetered {
			return failed(runtime.ReasonInternal, "this executor runs unmetered, and a deterministic run needs fuel metering; run the job on a metered worker"), false
		}
		hash, _, _ := strings.Cut(cm.key, "/") // the module's sha256, not this executor's settings
		lim.deterministic, lim.seed = true, deterministicSeed(hash, spec.Input)
	}
	if initial := uint64(cm.layout.MemoryMinPages) * pageSize; initial > lim.memory {
		res := failed(runtime.ReasonMemoryLimit, fmt.Sprintf(
			"module's initial memory %s exceeds the memory limit %s", humanBytes(initial), humanBytes(lim.memory)))
		res.Hint = fmt.Sprintf("raise it with --memory, to %s or more", humanBytes(initial))
		return res, false
	}
	return e.execute(ctx, cm.module, spec.Input, lim, host), false
}

// loadFailure turns an error from load into a Result.
func loadFailure(ctx context.Context, err error) runtime.Result {
	var merr *ModuleError
	switch {
	case errors.As(err, &merr):
		res := failed(merr.Reason, merr.Message)
		res.Hint = merr.Hint
		return res
	case ctx.Err() != nil:
		return failed(runtime.ReasonCanceled, "canceled while the module was compiling")
	}
	return failed(runtime.ReasonInternal, firstLine(err.Error()))
}

func failed(reason runtime.Reason, msg string) runtime.Result {
	return runtime.Result{Reason: reason, Message: msg}
}

// execute instantiates compiled and calls _start with the run's limits;
// host serves the run's palyra_v1 calls.
func (e *Executor) execute(ctx context.Context, compiled wazero.CompiledModule, input []byte, lim limits, host *hostState) runtime.Result {
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	unhook := context.AfterFunc(e.life, func() { stop(ErrClosed) })
	defer unhook()
	timed, cancelTimer := context.WithTimeoutCause(runCtx, lim.timeout, errTimeout)
	defer cancelTimer()

	alloc := newLimitedAllocator(lim.memory)
	stdout := newBoundedBuffer(lim.maxOutput, func() { stop(&outputLimitError{stream: "stdout"}) })
	stderr := newBoundedBuffer(lim.maxOutput, func() { stop(&outputLimitError{stream: "stderr"}) })
	var mask *secretMask
	if host != nil {
		mask = host.mask
	}
	// Both streams pass through a masking writer (mask.go): what it
	// passes on is the live stream and the record alike.
	teeOut, teeErr := &maskingWriter{mask: mask}, &maskingWriter{mask: mask}
	if lim.tap != nil {
		teeOut.w, teeErr.w = lim.tap.Writer(runtime.Stdout), lim.tap.Writer(runtime.Stderr)
	}
	stdout.tee, stderr.tee = teeOut, teeErr
	modCfg := wazero.NewModuleConfig().
		WithName(""). // anonymous: many instances of one module may run at once
		WithArgs("job").
		WithStdin(bytes.NewReader(input)).
		WithStdout(stdout).
		WithStderr(stderr).
		// Real clocks and sleep: wazero's defaults are a fake clock and a
		// no-op nanosleep, which surprise users (time.Sleep returns at once).
		// Determinism, where wanted, comes from fuel, not from fake time.
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(sleeper(timed)).
		WithRandSource(rand.Reader).
		WithStartFunctions() // _start is called below, so its error is not wrapped
	var vclock *virtualClock
	if lim.deterministic {
		vclock = &virtualClock{budget: lim.fuel}
		modCfg = withVirtualTime(modCfg, vclock, lim.seed)
	}

	callCtx := context.WithValue(experimental.WithMemoryAllocator(timed, alloc), hostStateKey{}, host)
	budget := lim.fuel
	if e.cfg.unmetered {
		budget = -1
	}
	var bind func(*meterGuard)
	if vclock != nil {
		bind = func(g *meterGuard) { vclock.meter = g }
	}
	instantiated, remaining, callErr := callStart(callCtx, e.rt, compiled, modCfg, budget, bind)
	alloc.recycle() // the guest's call returned: its memory may serve another run
	if e.life.Err() != nil && context.Cause(timed) == nil {
		// Close ended the run (closing the runtime ends its modules as if
		// they exited) before the AfterFunc above, which runs on its own
		// goroutine, recorded why.
		stop(ErrClosed)
	}

	var res runtime.Result
	if instantiated && budget >= 0 {
		res.FuelUsed = fuelUsed(budget, remaining)
	}
	var outFull, errFull bool
	res.Stdout, outFull = stdout.result()
	res.Stderr, errFull = stderr.result()
	// Secret values the guest read are masked in its output (mask.go),
	// the record as the live stream passed them on.
	teeOut.flush()
	teeErr.flush()
	res.Stdout, res.Stderr = teeOut.record(res.Stdout), teeErr.record(res.Stderr)
	o := outcome{
		err:          callErr,
		instantiated: instantiated,
		cause:        context.Cause(timed),
		callerDone:   ctx.Err() != nil,
		outputFull:   outFull || errFull,
		outOfFuel:    instantiated && budget >= 0 && fuel.IsOutOfFuel(callErr, remaining),
		refused:      alloc.refusedSize(),
		lim:          lim,
		stderr:       res.Stderr,
	}
	res.Reason, res.ExitCode, res.Message, res.Hint = o.classify()
	return res
}

// sleeper is the guest's nanosleep (WASI poll_oneoff on a clock): a real
// sleep that ends the run when the run's context ends. wazero's
// WithSysNanosleep is a plain time.Sleep, which a guest could use to hold
// its slot past its timeout: WithCloseOnContextDone interrupts guest code,
// not host calls. Unwinding with an ExitError is how wazero's own
// proc_exit leaves a host call; the run's context cause then says why.
func sleeper(ctx context.Context) func(ns int64) {
	return func(ns int64) {
		if ns <= 0 {
			return
		}
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
		}
	}
}

// callStart instantiates the module and runs it, turning a panic from
// wazero into an error. With a budget ≥ 0 the module is metered: the
// budget goes into its fuel global first, and remaining is what the global
// holds at the end. instantiated reports whether the guest was reached.
func callStart(ctx context.Context, rt wazero.Runtime, compiled wazero.CompiledModule, cfg wazero.ModuleConfig, budget int64, bind func(*meterGuard)) (instantiated bool, remaining int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("wasm runtime panicked: %v", r)
		}
	}()
	mod, err := rt.InstantiateModule(ctx, compiled, cfg)
	if err != nil {
		return false, 0, err
	}
	defer mod.Close(context.Background())
	var meter api.MutableGlobal
	if budget >= 0 {
		if meter, err = fuelGlobal(mod); err != nil {
			return false, 0, err
		}
		meter.Set(uint64(budget))
		defer func() { remaining = int64(meter.Get()) }()
		if bind != nil {
			bind(&meterGuard{g: meter})
		}
	}
	if init := mod.ExportedFunction(fuel.StartExport); init != nil && budget >= 0 {
		if _, err = init.Call(ctx); err != nil {
			return true, 0, err
		}
	}
	start := mod.ExportedFunction("_start")
	if start == nil { // checkLinkage guarantees it; stay defensive
		return true, 0, errors.New("module has no _start export")
	}
	_, err = start.Call(ctx)
	return true, 0, err
}
