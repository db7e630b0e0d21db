// Package wasm runs WebAssembly (WASI preview 1) jobs in wazero.
//
// An Executor owns one wazero runtime with its compiler engine. Modules are
// metered (runtime/wasm/fuel), compiled once and cached in memory (and on
// disk when Config.CacheDir is set); every run gets a fresh instance with
// its own limits: deterministic fuel budget, wall-clock timeout,
// linear-memory limit, bounded stdout/stderr. Stdin is the job's input,
// argv is ["job"], and there is no filesystem and no environment.
//
// Besides WASI preview 1, guests may import palyra_v1 (ABI.md): HTTP
// egress, secrets and key-value storage, each usable only when the job's
// Spec grants it (AllowHosts/AllowPrivate, Spec.Grants). A call without
// the grant returns an error code to the guest; it never traps.
package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Executor runs wasm Specs. It is safe for concurrent use.
type Executor struct {
	cfg     Config
	log     *slog.Logger
	rt      wazero.Runtime
	disk    wazero.CompilationCache                      // nil without CacheDir
	trim    *diskTrimmer                                 // nil without CacheDir
	imports map[string]map[string]api.FunctionDefinition // module → function → definition
	modules *moduleCache
	slots   *gate

	// life is cancelled by Close; runs and background compilations derive
	// from it so shutdown can stop them.
	life     context.Context
	shutdown context.CancelCauseFunc
	compiles sync.WaitGroup

	mu     sync.Mutex
	closed bool
	runs   sync.WaitGroup
}

var _ runtime.Executor = (*Executor)(nil)

// ErrClosed is returned by Validate after Close (and is the cause given to
// runs that Close stops).
var ErrClosed = errors.New("wasm executor closed")

// New creates an Executor. ctx bounds only the setup.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	cfg = cfg.withDefaults()
	// WithCloseOnContextDone stops call-free loops at the deadline. It
	// checks on every loop iteration, which costs CPU-bound guests about
	// half their speed, but nothing cheaper stops a running guest reliably:
	// draining the fuel global from another goroutine does not (the
	// optimizing compiler may keep it in a register across a tight loop).
	rc := wazero.NewRuntimeConfigCompiler().
		WithCloseOnContextDone(true).
		WithDebugInfoEnabled(false) // messages keep one line; skip DWARF work
	var disk wazero.CompilationCache
	if cfg.CacheDir != "" {
		if err := prepareCacheDir(cfg.CacheDir, cfg.Logger); err != nil {
			return nil, err
		}
		var err error
		if disk, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("wasm: opening compilation cache %s: %w", cfg.CacheDir, err)
		}
		rc = rc.WithCompilationCache(disk)
	}
	var trim *diskTrimmer
	if cfg.CacheDir != "" {
		trim = newDiskTrimmer(cfg.CacheDir, cfg.CacheMaxBytes, diskTrimEvery, cfg.Logger)
		trim.trim(time.Now()) // at start, before any compile
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiating WASI: %w", err)
	}
	if err := instantiateHost(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiating %s: %w", hostModule, err)
	}
	e := &Executor{
		cfg:  cfg,
		log:  cfg.Logger.With("executor", runtime.KindWasm),
		rt:   rt,
		disk: disk,
		trim: trim,
		imports: map[string]map[string]api.FunctionDefinition{
			wasiModule: rt.Module(wasiModule).ExportedFunctionDefinitions(),
			hostModule: rt.Module(hostModule).ExportedFunctionDefinitions(),
		},
		slots: newGate(cfg.MaxConcurrent),
	}
	e.life, e.shutdown = context.WithCancelCause(context.Background())
	// Compilations run on the executor's lifetime, not a caller's: they are
	// shared, and Close cancels them.
	compileCtx := experimental.WithCompilationWorkers(e.life, cfg.CompileWorkers)
	e.modules = newModuleCache(compileCtx, &e.compiles, cfg.MaxCachedModules, e.compile)
	return e, nil
}

// prepareCacheDir creates dir 0700 and refuses one others can write to:
// native code loaded from it runs inside the worker.
func prepareCacheDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("wasm: creating compilation cache dir: %w", err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("wasm: compilation cache dir: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("wasm: compilation cache %s is not a directory; point the cache at a directory", dir)
	}
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("wasm: compilation cache dir %s is writable by others (mode %v); run chmod 700 on it", dir, perm)
	} else if perm&0o077 != 0 {
		log.Warn("wasm compilation cache dir is readable by others; chmod 700 it", "dir", dir, "mode", fs.FileMode(perm))
	}
	return nil
}

// Kind implements runtime.Executor.
func (e *Executor) Kind() runtime.Kind { return runtime.KindWasm }

// Validate checks a module at submit time, as Run would before running it:
// it must be a core wasm binary no larger than MaxModuleSize that can be
// metered and compiles, imports only WASI preview 1 and palyra_v1
// functions (with their signatures) and exports _start. It compiles
// through the executor's cache, so a later Run of the same module is warm.
// A refused module yields a *ModuleError; other errors mean ctx ended or the
// executor failed.
func (e *Executor) Validate(ctx context.Context, module []byte) error {
	if !e.enter() {
		return ErrClosed
	}
	defer e.runs.Done()
	cm, err := e.load(ctx, module, "")
	if err != nil {
		return err
	}
	e.modules.release(cm)
	return nil
}

// Holds reports whether the module with this sha256 (lowercase hex) is in
// the executor's cache, compiled, being compiled or refused: running it
// would not compile it again. Validate puts a module there.
func (e *Executor) Holds(hash string) bool {
	return validHash(hash) && e.modules.has(hash+"/"+e.cfg.cacheSuffix())
}

// load returns the compiled module for bytes (checking them first). The
// caller releases it. hash, when given, is trusted as the cache key; it is
// verified against the bytes whenever they are compiled.
func (e *Executor) load(ctx context.Context, module []byte, hash string) (*compiledModule, error) {
	if merr := checkHeader(module); merr != nil {
		return nil, merr
	}
	if !validHash(hash) {
		sum := sha256.Sum256(module)
		hash = hex.EncodeToString(sum[:])
	}
	return e.modules.acquire(ctx, hash+"/"+e.cfg.cacheSuffix(), module)
}

// validHash reports whether h looks like a lowercase hex sha256.
func validHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// compile is the cache's compile step: verify the hash, bound the module's
// structure (before wazero allocates anything from it), apply the
// transform, add fuel metering, compile, then check what the module links
// against. Every byte slice CompileModule sees has passed scanModule.
func (e *Executor) compile(ctx context.Context, key string, module []byte) (wazero.CompiledModule, moduleLayout, error) {
	sum := sha256.Sum256(module)
	if hash := hex.EncodeToString(sum[:]); key != hash+"/"+e.cfg.cacheSuffix() {
		return nil, moduleLayout{}, fmt.Errorf("module hash mismatch: the bytes hash to %s", hash)
	}
	layout, err := scanModule(module)
	if err != nil {
		return nil, moduleLayout{}, structureError(err)
	}
	if e.cfg.Transform != nil {
		out, err := e.cfg.Transform(module)
		if err != nil {
			return nil, moduleLayout{}, invalid("", "preparing module: %s", firstLine(err.Error()))
		}
		if layout, err = scanModule(out); err != nil {
			return nil, moduleLayout{}, fmt.Errorf("transformed module is unusable: %w", err)
		}
		module = out
	}
	if !e.cfg.unmetered {
		if module, err = meter(module); err != nil {
			return nil, moduleLayout{}, err
		}
		// Metering grows code; a body near a limit can pass it. That is a
		// property of the module, so it is refused like one.
		if layout, err = scanModule(module); err != nil {
			return nil, moduleLayout{}, structureError(fmt.Errorf("with fuel metering added: %w", err))
		}
	}
	if module, err = capTables(module); err != nil {
		return nil, moduleLayout{}, fmt.Errorf("capping table sizes: %w", err)
	}
	compiled, err := e.rt.CompileModule(ctx, module)
	if err != nil {
		if ctx.Err() != nil {
			return nil, moduleLayout{}, fmt.Errorf("compiling module: %w", err)
		}
		return nil, moduleLayout{}, compileError(err)
	}
	if merr := checkLinkage(compiled, layout, e.imports); merr != nil {
		_ = compiled.Close(ctx)
		return nil, moduleLayout{}, merr
	}
	e.log.Debug("compiled wasm module", "key", key, "bytes", len(module))
	e.trim.request() // the compilation may have added an entry
	return compiled, layout, nil
}

// enter registers a run; it fails once Close has begun.
func (e *Executor) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.runs.Add(1)
	return true
}

// Close implements runtime.Executor. It refuses new runs, waits for running
// ones until ctx ends, then stops whatever is left (those runs end with
// ReasonInternal) and frees the runtime.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	already := e.closed
	e.closed = true
	e.mu.Unlock()
	if already {
		return nil
	}
	done := make(chan struct{})
	go func() {
		e.runs.Wait()
		e.compiles.Wait()
		close(done)
	}()
	var waitErr error
	select {
	case <-done:
	case <-ctx.Done():
		waitErr = fmt.Errorf("wasm: runs still active at close: %w", context.Cause(ctx))
	}
	e.shutdown(ErrClosed)
	e.trim.close()
	err := e.rt.Close(context.Background())
	if e.disk != nil {
		err = errors.Join(err, e.disk.Close(context.Background()))
	}
	if err != nil {
		err = fmt.Errorf("wasm: closing runtime: %w", err)
	}
	return errors.Join(waitErr, err)
}
