package wasm

import (
	"log/slog"
	"runtime"
	"time"
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
)

// Config tunes an Executor. Every zero field takes a sane default.
type Config struct {
	// CacheDir, when set, holds wazero's on-disk compilation cache so a
	// restarted worker does not recompile modules it has seen. It is created
	// 0700; native code loaded from it is executed, so it must not be
	// writable by anyone else.
	CacheDir string
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
	// Transform, when set, rewrites a module before it is compiled (the seam
	// for fuel metering). The submitted module's structure is checked first;
	// the output is checked again and is what links and runs, so it must
	// keep the module's imports and its _start export.
	Transform func(module []byte) ([]byte, error)
	// TransformVersion names the Transform's output format; it is part of
	// the compiled-module cache key, so change it whenever Transform changes.
	TransformVersion string
	// Logger receives debug and warning records. Default: slog.Default().
	Logger *slog.Logger
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
	if cfg.CompileWorkers <= 0 {
		cfg.CompileWorkers = runtime.GOMAXPROCS(0)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}
