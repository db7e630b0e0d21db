package api

import (
	"testing"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/runtime/browser"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

// TestDefaultsClientsShowAreApplied: the defaults the CLI shows for a
// limit left at zero (palyrav1) are the ones jobs get.
func TestDefaultsClientsShowAreApplied(t *testing.T) {
	if palyrav1.DefaultFuel != wasm.DefaultFuel || palyrav1.DefaultMemoryBytes != wasm.DefaultMemoryLimit ||
		DefaultMemory != palyrav1.DefaultMemoryBytes || DefaultTimeout.Milliseconds() != palyrav1.DefaultTimeoutMs || wasm.DefaultTimeout != DefaultTimeout {
		t.Fatalf("defaults differ: fuel %d/%d memory %d/%d/%d timeout %v/%d/%v", palyrav1.DefaultFuel, wasm.DefaultFuel,
			palyrav1.DefaultMemoryBytes, wasm.DefaultMemoryLimit, DefaultMemory, DefaultTimeout, palyrav1.DefaultTimeoutMs, wasm.DefaultTimeout)
	}
	for name, applied := range map[string]uint64{"wasm": wasm.DefaultMaxOutput, "browser": browser.DefaultMaxOutput} {
		if applied != palyrav1.DefaultMaxOutputBytes {
			t.Fatalf("default max output: %s applies %d, clients show %d", name, applied, palyrav1.DefaultMaxOutputBytes)
		}
	}
}
