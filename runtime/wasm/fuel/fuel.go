// Package fuel adds deterministic fuel metering to a WebAssembly module by
// rewriting its binary before it is compiled.
//
// wazero has no native fuel, and its function listeners count calls, not
// instructions, so a call-free loop would never be charged. Instrument
// instead appends one mutable i64 global, exports it as GlobalExport, and
// inserts at the entry of every basic block a charge that subtracts the
// block's cost from the global and traps (unreachable) once it is negative.
// The fuel a run uses is therefore a pure function of the path it executed.
//
// The host protocol:
//
//  1. instantiate the instrumented module without running start functions;
//  2. set the GlobalExport global to the budget;
//  3. call StartExport if the module exports it, then the entry point;
//  4. read the global back: Used(budget, remaining) is what the run cost,
//     and RunError turns a trap with a negative remaining into ErrOutOfFuel.
//
// The transform is a pure byte-to-byte function with its own decoder; it
// accepts WebAssembly 2.0 (MVP, sign extension, non-trapping float-to-int,
// bulk memory, reference types, multi-value, SIMD) and refuses anything else
// with an error rather than guessing.
package fuel

import (
	"errors"
	"fmt"
)

// Version names the instrumentation's output format. It is part of compiled
// module cache keys: bump it whenever the emitted code changes.
const Version = 1

// GlobalExport is the export name of the fuel global (a mutable i64).
const GlobalExport = "palyra_fuel"

// StartExport is the export name under which Instrument re-exports a
// module's start function. The start section is removed so that the start
// function runs under the budget the host sets, instead of during
// instantiation with no budget at all.
const StartExport = "palyra_start"

// Limits applied to every module; they keep hostile input cheap to refuse.
const (
	// DefaultMaxModuleSize is the module size limit when Options leaves it 0.
	DefaultMaxModuleSize = 64 << 20
	// MaxFunctions bounds the number of functions a module defines.
	MaxFunctions = 1_000_000
	// MaxBodySize bounds one function body in bytes.
	MaxBodySize = 8 << 20
	// MaxLocals bounds the locals one function declares (the limit browsers use).
	MaxLocals = 50_000
	// MaxNesting bounds how deeply blocks, loops and ifs nest in one function.
	MaxNesting = 100_000
)

// Costs of the bulk operations (memory.copy/fill/init, table.copy/fill/init,
// table.grow): besides their 1, they are charged at run time one unit per
// 2^BulkShift bytes or elements they touch.
const BulkShift = 6

// Options tunes Instrument. The zero value is the production setting; no
// field changes the output bytes, so Options is not part of cache keys.
type Options struct {
	// MaxModuleSize caps the input size in bytes; 0 means DefaultMaxModuleSize.
	MaxModuleSize int
}

// Errors Instrument and RunError return; match them with errors.Is.
var (
	// ErrOutOfFuel marks a run that trapped because its budget ran out.
	ErrOutOfFuel = errors.New("out of fuel")
	// ErrMalformed marks input that is not a well-formed wasm binary.
	ErrMalformed = errors.New("malformed wasm module")
	// ErrUnsupported marks a well-formed module using a feature outside
	// WebAssembly 2.0 (threads, tail calls, exceptions, GC, ...).
	ErrUnsupported = errors.New("unsupported wasm feature")
	// ErrLimit marks a module over one of the size limits above.
	ErrLimit = errors.New("wasm module over instrumentation limit")
	// ErrReservedName marks a module that already exports GlobalExport or
	// StartExport.
	ErrReservedName = errors.New("reserved export name")
)

// Used returns the fuel a run consumed: budget minus what was left. After
// an out-of-fuel trap it exceeds budget by at most the cost of the block
// that tripped the check.
func Used(budget, remaining int64) int64 {
	return budget - remaining
}

// IsOutOfFuel reports whether a run that ended with runErr and left
// remaining fuel in the global stopped because its budget ran out: the
// guest trapped and the global is negative. Only a failed charge makes the
// global negative, and a failed charge always traps.
func IsOutOfFuel(runErr error, remaining int64) bool {
	return runErr != nil && remaining < 0
}

// RunError interprets a metered run's outcome: when IsOutOfFuel, it returns
// an error matching both ErrOutOfFuel and runErr; otherwise runErr itself.
func RunError(runErr error, remaining int64) error {
	if !IsOutOfFuel(runErr, remaining) {
		return runErr
	}
	return fmt.Errorf("%w (fuel global is %d): %w", ErrOutOfFuel, remaining, runErr)
}
