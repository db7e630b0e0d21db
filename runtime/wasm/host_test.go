package wasm

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
)

func TestMessagesAreCutOnRuneBoundaries(t *testing.T) {
	long := strings.Repeat("é", abi.MaxErrorMessage) // 2 bytes each
	got := clipMessage("x" + long)
	if len(got) > abi.MaxErrorMessage || !utf8.ValidString(got) || len(got) < abi.MaxErrorMessage-1 {
		t.Errorf("clipMessage: %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
	name := clipName(strings.Repeat("世", 100))
	if !utf8.ValidString(name) || !strings.HasSuffix(name, "…") || len(name) > 128+len("…") {
		t.Errorf("clipName = %q", name)
	}
	if clipName("short") != "short" {
		t.Error("clipName changed a short name")
	}
}
