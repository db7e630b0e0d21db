package node_test

import (
	"testing"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
)

// The guest ABI's key-value limits are the store's: ABI.md said keys of
// 1024 bytes and values of 1 MiB while the store took 512 and 64 KiB, so a
// guest within the ABI's limits was told "service unavailable".
func TestGuestLimitsAreTheStores(t *testing.T) {
	if abi.MaxKey != consensus.MaxKVKey || abi.MaxValue != consensus.MaxKVValue {
		t.Fatalf("abi key %d / value %d; the store takes %d / %d", abi.MaxKey, abi.MaxValue, consensus.MaxKVKey, consensus.MaxKVValue)
	}
}
