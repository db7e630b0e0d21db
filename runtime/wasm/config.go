package wasm

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/palyra-mesh/palyra/runtime/wasm/egress"
)

// MaxModuleSize is the largest module Validate and Run accept. A Go wasip1
// program is 2–3 MiB; 16 MiB leaves room for big guests while keeping a
// hostile submission from costing the compiler minutes.
const MaxModuleSize = 16 << 20

// Defaults applied when a Config or Spec field is zero.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMemoryLimit      = 64 << 20
	DefaultMaxOutput        = 1 << 20
	DefaultMaxCachedModules = 32
	DefaultHostCallTimeout  = 10 * time.Second
)

// DefaultFuel is the fuel budget of a Spec with no Fuel: 10^10 units. A
// unit is about one executed wasm instruction; wazero on this project's
// 2-core test machines runs 0.7–4·10^9 units per second (a Go guest's
// busy loop at the low end, C at the high end). The examples/reverse Go
// guest (runtime start-up, read, reverse, write) uses ~680,000 units, so
// ordinary jobs use a tiny fraction of the default, while a runaway
// CPU-bound job stops deterministically after a few seconds of CPU,
// usually before the 30 s wall clock. Jobs that need more ask with --fuel.
const DefaultFuel uint64 = 10_000_000_000

// Config tunes an Executor. Every zero field takes a sane default.
type Config struct {
	// CacheDir, when set, holds wazero's on-disk compilation cache so a
	// restarted worker does not recompile modules it has seen. It is created
	// 0700; native code loaded from it is executed, so it must not be
	// writable by anyone else.
	CacheDir string
	// CacheMaxBytes bounds CacheDir (default DefaultCacheMaxBytes): the
	// entries written longest ago go first.
	CacheMaxBytes int64
	// MaxConcurrent bounds how many guests run at once; Run waits for a slot.
	// Default: 2 × GOMAXPROCS.
	MaxConcurrent int
	// DefaultTimeout applies to a Spec with no Timeout.
	DefaultTimeout time.Duration
	// DefaultMemoryLimit (bytes) applies to a Spec with no MemoryLimit.
	DefaultMemoryLimit uint64
	// DefaultMaxOutput (bytes, per stream) applies to a Spec with no MaxOutput.
	DefaultMaxOutput int
	// MaxCachedModules bounds the in-memory cache of compiled modules.
	MaxCachedModules int
	// CompileWorkers is how many goroutines compile one module's functions
	// in parallel (a cold Go guest takes ~0.7 s on one core). Default:
	// GOMAXPROCS.
	CompileWorkers int
	// Transform, when set, rewrites a module before it is metered and
	// compiled. The submitted module's structure is checked first; the
	// output is checked again, metered, checked once more, and is what
	// links and runs, so it must keep the module's imports and its _start
	// export.
	Transform func(module []byte) ([]byte, error)
	// TransformVersion names the Transform's output format; it is part of
	// the compiled-module cache key, so change it whenever Transform changes.
	TransformVersion string
	// DefaultFuel is the fuel budget of a Spec with no Fuel (see the
	// package constant DefaultFuel). Every module is metered: fuel is
	// added after Transform, and the budget is enforced deterministically,
	// so a job that fits its budget on one worker fits it on all.
	DefaultFuel uint64
	// HostCallTimeout bounds one palyra_v1 host call (an HTTP fetch, a
	// secret or key-value lookup); the job's own timeout still applies.
	HostCallTimeout time.Duration
	// Logger receives debug and warning records. Default: slog.Default().
	Logger *slog.Logger

	// unmetered skips fuel instrumentation (benchmarks compare against it).
	unmetered bool
	// resolver replaces the system DNS resolver for HTTP egress (tests).
	resolver egress.Resolver
}

// withDefaults returns cfg with every zero field filled in.
func (cfg Config) withDefaults() Config {
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 2 * runtime.GOMAXPROCS(0)
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.DefaultMemoryLimit == 0 {
		cfg.DefaultMemoryLimit = DefaultMemoryLimit
	}
	if cfg.DefaultMaxOutput <= 0 {
		cfg.DefaultMaxOutput = DefaultMaxOutput
	}
	if cfg.MaxCachedModules <= 0 {
		cfg.MaxCachedModules = DefaultMaxCachedModules
	}
	if cfg.CacheMaxBytes <= 0 {
		cfg.CacheMaxBytes = DefaultCacheMaxBytes
	}
	if cfg.CompileWorkers <= 0 {
		cfg.CompileWorkers = runtime.GOMAXPROCS(0)
	}
	if cfg.DefaultFuel == 0 {
		cfg.DefaultFuel = DefaultFuel
	}
	if cfg.HostCallTimeout <= 0 {
		cfg.HostCallTimeout = DefaultHostCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}
