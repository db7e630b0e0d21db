package wasm

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime"
)

// TestHostileModulesLeaveExecutorHealthy runs a series of hostile modules
// through one executor: each fails with its own reason, and after each the
// executor still runs a normal job.
func TestHostileModulesLeaveExecutorHealthy(t *testing.T) {
	e := newExecutor(t, Config{})
	withSection := func(id byte, body []byte) []byte {
		return append(bytes.Clone(wasmHeader()), section(id, body)...)
	}
	// A function body claiming 100 MB, and a data segment claiming 1 GiB.
	hugeBody := withSection(sectionCode, append(uleb(1), uleb(100<<20)...))
	hugeData := append(bytes.Clone(trivialModule), section(sectionData, append(append(uleb(1), 0, opI32Const, 0, opEnd), uleb(1<<30)...))...)
	badIndex := func(code ...byte) []byte { return command(code...) }

	for _, tc := range []struct {
		name   string
		spec   runtime.Spec
		reason runtime.Reason
		want   string
	}{
		{"deep recursion", runtime.Spec{Module: recursionModule}, runtime.ReasonTrap, "stack overflow (recursion too deep)"},
		{"memory bomb", runtime.Spec{Module: testwasm.Build(t, "membomb"), MemoryLimit: 16 << 20}, runtime.ReasonMemoryLimit, "memory limit 16 MiB reached"},
		{"huge initial memory", runtime.Spec{Module: testModule{
			types: []funcType{{}}, funcs: []testFunc{{}}, memory: []uint32{65536},
			exports: []testExport{{"_start", 0, 0}},
		}.bytes()}, runtime.ReasonMemoryLimit, "initial memory 4 GiB exceeds the memory limit"},
		{"huge output", runtime.Spec{Module: writeModule(1, strings.Repeat("x", 4096), true, 0), MaxOutput: 1 << 20}, runtime.ReasonOutputLimit, "stdout exceeded 1 MiB"},
		{"huge global count", runtime.Spec{Module: withSection(sectionGlobal, uleb(0xffffffff))}, runtime.ReasonInvalidModule, "global section"},
		{"huge import count", runtime.Spec{Module: withSection(sectionImport, uleb(1<<28))}, runtime.ReasonInvalidModule, "import section"},
		{"huge function body", runtime.Spec{Module: hugeBody}, runtime.ReasonInvalidModule, "code section"},
		{"huge data segment", runtime.Spec{Module: hugeData}, runtime.ReasonInvalidModule, "data section"},
		{"call to a missing function", runtime.Spec{Module: badIndex(opCall, 99)}, runtime.ReasonInvalidModule, "module does not compile"},
		{"missing global", runtime.Spec{Module: badIndex(0x23, 99, opDrop)}, runtime.ReasonInvalidModule, "module does not compile"},
		{"missing local", runtime.Spec{Module: badIndex(0x20, 99, opDrop)}, runtime.ReasonInvalidModule, "module does not compile"},
		{"missing type", runtime.Spec{Module: testModule{
			types: []funcType{{}}, funcs: []testFunc{{typeIdx: 99}}, exports: []testExport{{"_start", 0, 0}},
		}.bytes()}, runtime.ReasonInvalidModule, "module is malformed at offset 17: function type index 99 out of range (1 types)"},
		{"export of a missing function", runtime.Spec{Module: testModule{
			types: []funcType{{}}, funcs: []testFunc{{}}, exports: []testExport{{"_start", 0, 99}},
		}.bytes()}, runtime.ReasonInvalidModule, `module does not compile: unknown function for export["_start"]`},
		{"infinite loop", runtime.Spec{Module: loopModule, Timeout: time.Hour, Fuel: 10_000_000}, runtime.ReasonOutOfFuel, "out of fuel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.Run(context.Background(), tc.spec)
			wantReason(t, res, tc.reason, tc.want)
			ok := e.Run(context.Background(), runtime.Spec{Module: writeModule(1, "still fine", false, 0)})
			if !ok.OK() || string(ok.Stdout) != "still fine" {
				t.Fatalf("executor unhealthy after %s: %s %s %q", tc.name, ok.Reason, ok.Message, ok.Stdout)
			}
		})
	}
	res := e.Run(context.Background(), runtime.Spec{Module: testwasm.Build(t, "reverse"), Input: []byte("healthy")})
	if !res.OK() || string(res.Stdout) != "yhtlaeh" {
		t.Fatalf("Go guest after the hostile series: %s %s %q", res.Reason, res.Message, res.Stdout)
	}
}
