package wasm

import (
	"crypto/sha256"
	"io"
	mrand "math/rand/v2"

	"github.com/tetratelabs/wazero"
)

// Deterministic runs see a virtual clock: it starts at virtualEpoch and
// advances one nanosecond per unit of fuel the guest burns, plus whatever
// it sleeps (a sleep returns at once and moves the clock on). Both the
// wall clock and the monotonic clock read it. Random bytes come from a
// ChaCha8 generator seeded by the module and the input. Fuel is a pure
// function of the instructions run, so everything a guest can observe is
// a function of its module and input.
const (
	virtualEpoch = 946_684_800 // 2000-01-01T00:00:00Z, in Unix seconds
	nsPerFuel    = 1
)

// virtualClock is one deterministic run's clock.
type virtualClock struct {
	budget int64
	meter  *meterGuard // bound once the module is instantiated
	slept  int64       // ns of virtual sleep
}

// elapsed is the run's virtual time, in ns.
func (c *virtualClock) elapsed() int64 {
	used := int64(0)
	if c.meter != nil {
		used = max(c.budget-c.meter.get(), 0)
	}
	return used*nsPerFuel + c.slept
}

func (c *virtualClock) walltime() (int64, int32) {
	t := c.elapsed()
	return virtualEpoch + t/1e9, int32(t % 1e9)
}

func (c *virtualClock) nanotime() int64 { return c.elapsed() }

func (c *virtualClock) sleep(ns int64) {
	if ns > 0 {
		c.slept += ns
	}
}

// deterministicSeed derives the generator's seed from what defines a run.
func deterministicSeed(moduleKey string, input []byte) [32]byte {
	h := sha256.New()
	io.WriteString(h, "palyra deterministic run v1\x00")
	io.WriteString(h, moduleKey)
	h.Write([]byte{0})
	h.Write(input)
	var seed [32]byte
	copy(seed[:], h.Sum(nil))
	return seed
}

// withVirtualTime configures cfg for a deterministic run on c.
func withVirtualTime(cfg wazero.ModuleConfig, c *virtualClock, seed [32]byte) wazero.ModuleConfig {
	return cfg.
		WithWalltime(c.walltime, 1).
		WithNanotime(c.nanotime, 1).
		WithNanosleep(c.sleep).
		WithOsyield(func() {}).
		WithRandSource(mrand.NewChaCha8(seed))
}
