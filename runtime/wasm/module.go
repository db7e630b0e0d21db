package wasm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// wasiModule is the WASI import namespace; hostModule (host.go) is the other.
const wasiModule = wasi_snapshot_preview1.ModuleName

// buildHint is the fix for anything that is not a WASI command module.
const buildHint = "build with GOOS=wasip1 GOARCH=wasm or clang --target=wasm32-wasi"

// ModuleError says why a module was refused, at submit time (Validate) or at
// run time. Callers read it with errors.As; Reason is a wire name.
type ModuleError struct {
	Reason  runtime.Reason
	Message string // what is wrong, one line
	Hint    string // what to do about it, one line (may be empty)
}

// Error joins Message and Hint into one line.
func (e *ModuleError) Error() string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + "; " + e.Hint
}

func invalid(hint, format string, args ...any) *ModuleError {
	return &ModuleError{Reason: runtime.ReasonInvalidModule, Message: fmt.Sprintf(format, args...), Hint: hint}
}

// checkHeader refuses what is plainly not a wasm module before anything
// expensive runs.
func checkHeader(module []byte) *ModuleError {
	switch {
	case len(module) == 0:
		return invalid(buildHint, "empty module")
	case len(module) > MaxModuleSize:
		return invalid("strip debug info (go build -ldflags='-s -w', or wasm-strip) or make the module smaller",
			"module is %s, more than the %s limit", humanBytes(uint64(len(module))), humanBytes(MaxModuleSize))
	case !bytes.HasPrefix(module, wasmMagic) && !bytes.HasPrefix(wasmMagic, module):
		return invalid(buildHint, "not a WebAssembly module (bad magic)")
	case len(module) < 8:
		return invalid("the file is truncated; upload it again", "truncated module (%d bytes, the header alone is 8)", len(module))
	case !bytes.Equal(module[4:8], wasmVersion1):
		return invalid("only core WebAssembly modules run here, not components; "+buildHint,
			"unsupported WebAssembly binary version %d (want 1)", binary.LittleEndian.Uint32(module[4:8]))
	}
	return nil
}

// structureError turns a scanModule failure into a ModuleError.
func structureError(err error) *ModuleError {
	var lim *limitError
	switch {
	case errors.As(err, &lim):
		return invalid("make the module smaller (strip unused code, or split the job)",
			"module exceeds an implementation limit: %s", firstLine(err.Error()))
	}
	return invalid("the file may be corrupt or truncated; rebuild it ("+buildHint+")",
		"module is malformed: %s", firstLine(err.Error()))
}

// compileError turns a wazero compile failure into a ModuleError.
func compileError(err error) *ModuleError {
	return invalid("the file may be corrupt or truncated; rebuild it ("+buildHint+")",
		"module does not compile: %s", firstLine(err.Error()))
}

// checkLinkage refuses modules that could not run here: imports other than
// WASI preview 1 and palyra_v1 functions with the right signatures, or no
// _start command entry point. imports maps each import module the
// executor provides to its functions.
func checkLinkage(compiled wazero.CompiledModule, layout moduleLayout, imports map[string]map[string]api.FunctionDefinition) *ModuleError {
	const importHint = "only " + wasiModule + " and " + hostModule + " functions are available (see runtime/wasm/ABI.md); " + buildHint + " and no other host-specific imports"
	for _, im := range layout.Imports {
		funcs, ok := imports[im.Module]
		if !ok {
			return invalid(importHint, "module imports %s %q from %q", im.kindName(), im.Name, im.Module)
		}
		if im.Kind != importFunc {
			return invalid(importHint, "module imports %s %q from %s, which provides only functions", im.kindName(), im.Name, im.Module)
		}
		if _, ok := funcs[im.Name]; !ok {
			family := im.Module
			if im.Module == wasiModule {
				family = "WASI"
			}
			return invalid(importHint, "module imports unknown %s function %s.%s", family, im.Module, im.Name)
		}
	}
	for _, def := range compiled.ImportedFunctions() {
		mod, name, _ := def.Import()
		want, ok := imports[mod][name]
		if !ok {
			return invalid(importHint, "module imports function %q from %q", name, mod)
		}
		if !sameSignature(def, want) {
			return invalid(importHint, "module imports %s.%s as %s, but it is %s",
				mod, name, signature(def), signature(want))
		}
	}
	start, ok := compiled.ExportedFunctions()["_start"]
	if !ok {
		return invalid("build a command (package main with func main; for C, a main function), not a library or reactor",
			"module has no _start export")
	}
	if len(start.ParamTypes()) != 0 || len(start.ResultTypes()) != 0 {
		return invalid("export _start as a function with no parameters and no results",
			"module's _start is %s", signature(start))
	}
	return nil
}

func sameSignature(a, b api.FunctionDefinition) bool {
	return slices.Equal(a.ParamTypes(), b.ParamTypes()) && slices.Equal(a.ResultTypes(), b.ResultTypes())
}

// signature renders a function type like the text format: (i32 i32) -> (i32).
func signature(def api.FunctionDefinition) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, " ") + ")"
	}
	return names(def.ParamTypes()) + " -> " + names(def.ResultTypes())
}
