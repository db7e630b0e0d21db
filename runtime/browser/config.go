package browser

import (
	"log/slog"
	"time"
)

// Defaults applied when a Config or Spec field is zero.
const (
	DefaultSlots             = 2
	DefaultTimeout           = 60 * time.Second
	DefaultStepTimeout       = 15 * time.Second
	DefaultMaxArtifactBytes  = 8 << 20
	DefaultMaxArtifactsTotal = 32 << 20
	DefaultMaxOutput         = 1 << 20
	DefaultStartTimeout      = 30 * time.Second
	DefaultWindowWidth       = 1280
	DefaultWindowHeight      = 800
)

// Config tunes an Executor. Every zero field takes a default.
type Config struct {
	// ExecPath is the Chromium binary. Default: what Detect finds.
	ExecPath string
	// Slots bounds how many jobs run at once; Run waits for a slot. Each
	// slot has a browser process tree of its own (lane.go).
	Slots int
	// DefaultTimeout bounds a job whose Spec has no Timeout.
	DefaultTimeout time.Duration
	// StepTimeout bounds one step unless the step sets timeout_ms.
	StepTimeout time.Duration
	// MaxArtifactBytes bounds each screenshot or PDF.
	MaxArtifactBytes int
	// MaxArtifactsTotal bounds the sum of one job's artifacts.
	MaxArtifactsTotal int
	// DefaultMaxOutput bounds Stdout and Stderr, each, for a Spec with no
	// MaxOutput.
	DefaultMaxOutput int
	// StartTimeout bounds starting the browser process.
	StartTimeout time.Duration
	// WindowWidth and WindowHeight set the viewport, in CSS pixels.
	WindowWidth, WindowHeight int
	// MaxSessions bounds the interactive sessions open at once (apart from
	// the job slots); SessionIdleTTL closes one unused that long, and
	// SessionLifetime closes any that old.
	MaxSessions                     int
	SessionIdleTTL, SessionLifetime time.Duration
	// Prewarm keeps one browser context per slot made ahead of jobs
	// (pool.go): a short job starts ~45 ms sooner. Each waiting context
	// holds its own egress proxy, listening on loopback and admitting
	// nothing until a job takes it, so an idle worker then holds listening
	// loopback TCP sockets besides its QUIC port; off by default for that
	// reason.
	Prewarm bool
	// ProfileDir holds the browsers' profiles (user data directories), one
	// per browser process, each removed once its browser exits. New
	// empties it of profiles first: one there belongs to a browser of a
	// process that was killed before it could remove it (a node's data
	// directory is held by one process at a time). Default: a temporary
	// directory per browser, which a killed process leaves behind.
	ProfileDir string
	// Logger receives debug and warning records. Default: slog.Default().
	Logger *slog.Logger

	layers layers // tests only
}

func (cfg Config) withDefaults() Config {
	if cfg.Slots <= 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.SessionIdleTTL <= 0 {
		cfg.SessionIdleTTL = DefaultSessionIdleTTL
	}
	if cfg.SessionLifetime <= 0 {
		cfg.SessionLifetime = DefaultSessionLifetime
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.MaxArtifactBytes <= 0 {
		cfg.MaxArtifactBytes = DefaultMaxArtifactBytes
	}
	if cfg.MaxArtifactsTotal <= 0 {
		cfg.MaxArtifactsTotal = DefaultMaxArtifactsTotal
	}
	if cfg.DefaultMaxOutput <= 0 {
		cfg.DefaultMaxOutput = DefaultMaxOutput
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.WindowWidth <= 0 {
		cfg.WindowWidth = DefaultWindowWidth
	}
	if cfg.WindowHeight <= 0 {
		cfg.WindowHeight = DefaultWindowHeight
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}
