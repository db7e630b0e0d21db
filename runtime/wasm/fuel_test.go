package wasm

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime"
)

// cwasi is the fuel package's C WASI guest: it reads n on stdin, sorts n
// pseudo-random numbers and prints a digest. It reads no clock and no
// randomness, so its fuel is a function of n alone.
func cwasi(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("fuel/testdata/cwasi.wasm")
	if err != nil {
		t.Fatalf("reading the C test guest: %v", err)
	}
	return b
}

func TestFuelIsDeterministic(t *testing.T) {
	mod := cwasi(t)
	spec := runtime.Spec{Module: mod, Input: []byte("20000\n")}
	// Two executors with separate compilation caches stand in for two nodes.
	nodeA := newExecutor(t, Config{})
	nodeB := newExecutor(t, Config{CacheDir: t.TempDir()})

	first := nodeA.Run(context.Background(), spec)
	wantReason(t, first, runtime.ReasonNone)
	if first.FuelUsed == 0 || !strings.HasPrefix(string(first.Stdout), "n=20000 ") {
		t.Fatalf("FuelUsed = %d, stdout %q", first.FuelUsed, first.Stdout)
	}
	t.Logf("cwasi(20000) used %d fuel", first.FuelUsed)
	for i, e := range []*Executor{nodeA, nodeA, nodeB, nodeB} {
		res := e.Run(context.Background(), spec)
		wantReason(t, res, runtime.ReasonNone)
		if res.FuelUsed != first.FuelUsed || string(res.Stdout) != string(first.Stdout) {
			t.Errorf("run %d: FuelUsed %d, stdout %q; first run: %d, %q", i, res.FuelUsed, res.Stdout, first.FuelUsed, first.Stdout)
		}
	}

	// Another input takes another path, and another amount of fuel.
	other := nodeB.Run(context.Background(), runtime.Spec{Module: mod, Input: []byte("20001\n")})
	if other.FuelUsed == first.FuelUsed {
		t.Errorf("inputs 20000 and 20001 both used %d fuel", other.FuelUsed)
	}

	// The exact amount is enough; one unit less is not, on either node.
	exact := spec
	exact.Fuel = first.FuelUsed
	res := nodeB.Run(context.Background(), exact)
	wantReason(t, res, runtime.ReasonNone)
	if res.FuelUsed != first.FuelUsed {
		t.Errorf("with the exact budget FuelUsed = %d, want %d", res.FuelUsed, first.FuelUsed)
	}
	short := spec
	short.Fuel = first.FuelUsed - 1
	for _, e := range []*Executor{nodeA, nodeB} {
		res := e.Run(context.Background(), short)
		wantReason(t, res, runtime.ReasonOutOfFuel, fmt.Sprintf("out of fuel after %d units", short.Fuel))
		if res.FuelUsed != short.Fuel {
			t.Errorf("out of fuel: FuelUsed = %d, want the whole budget %d", res.FuelUsed, short.Fuel)
		}
	}
}

func TestFuelStopsCallFreeLoop(t *testing.T) {
	e := newExecutor(t, Config{})
	// Fuel stops it long before a one-hour timeout...
	res := e.Run(context.Background(), runtime.Spec{Module: loopModule, Fuel: 5_000_000, Timeout: time.Hour})
	wantReason(t, res, runtime.ReasonOutOfFuel, "out of fuel after 5000000 units")
	// ...and so does the default budget.
	small := newExecutor(t, Config{DefaultFuel: 1_000_000})
	res = small.Run(context.Background(), runtime.Spec{Module: testwasm.Build(t, "spin"), Timeout: time.Hour})
	wantReason(t, res, runtime.ReasonOutOfFuel, "out of fuel after 1000000 units")
	// With a budget too big to matter, the timeout stops it.
	res = e.Run(context.Background(), runtime.Spec{Module: loopModule, Fuel: math.MaxUint64, Timeout: 100 * time.Millisecond})
	wantReason(t, res, runtime.ReasonTimeout, "timed out after 100ms")
	if res.FuelUsed == 0 {
		t.Error("a loop that ran until the timeout reports no fuel used")
	}
	// The executor is still healthy.
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: trivialModule}), runtime.ReasonNone)
}

func TestFuelStopsRecursion(t *testing.T) {
	e := newExecutor(t, Config{})
	res := e.Run(context.Background(), runtime.Spec{Module: recursionModule, Fuel: 1000})
	wantReason(t, res, runtime.ReasonOutOfFuel, "out of fuel after 1000 units")
}

func TestGoGuestReportsFuel(t *testing.T) {
	e := newExecutor(t, Config{})
	res := e.Run(context.Background(), runtime.Spec{Module: testwasm.Build(t, "reverse"), Input: []byte("fuel")})
	wantReason(t, res, runtime.ReasonNone)
	// A Go guest's runtime start-up alone runs hundreds of thousands of
	// instructions; its exact figure varies a little between runs because
	// the Go runtime reads the real clock (see DESIGN.md).
	if res.FuelUsed < 100_000 || res.FuelUsed > DefaultFuel/1000 {
		t.Errorf("reverse used %d fuel, want a Go start-up's worth, far below the default budget", res.FuelUsed)
	}
	res = e.Run(context.Background(), runtime.Spec{Module: testwasm.Build(t, "reverse"), Input: []byte("fuel"), Fuel: 10_000})
	wantReason(t, res, runtime.ReasonOutOfFuel, "out of fuel after 10000 units")
}

// startSectionModule has a start section that stores 42 at address 0 and
// a _start that traps unless it finds it: the instrumented module must run
// the start function (as palyra_start) under the budget before _start.
func startSectionModule(startCode []byte) []byte {
	m := testModule{
		types: []funcType{{}},
		funcs: []testFunc{
			{code: append(append([]byte{opI32Const, 0, opI32Const}, sleb(42)...), 0x36, 2, 0)}, // i32.store
			{code: []byte{opI32Const, 0, opI32Load, 2, 0, opI32Const, 42, 0x47, opIf, blockVoid, opUnreachable, opEnd}},
		},
		memory:  []uint32{1},
		exports: []testExport{{"_start", 0, 1}},
	}
	if startCode != nil {
		m.funcs[0].code = startCode
	}
	b := m.bytes()
	// Insert the start section (id 8, function 0) before the code section.
	i := indexSection(b, sectionCode)
	return append(append(append([]byte{}, b[:i]...), section(sectionStart, uleb(0))...), b[i:]...)
}

// indexSection finds the offset of the first section with id in a module
// built by testModule.bytes.
func indexSection(b []byte, id byte) int {
	r := reader{b: b, off: 8}
	for !r.done() {
		start := r.off
		got, _ := r.byte()
		if _, err := r.sub(); err != nil {
			panic(err)
		}
		if got == id {
			return start
		}
	}
	panic("no such section")
}

func TestStartSectionRunsUnderBudget(t *testing.T) {
	e := newExecutor(t, Config{})
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: startSectionModule(nil)}), runtime.ReasonNone)
	// An infinite start function is stopped by fuel, not by the clock.
	spin := startSectionModule([]byte{opLoop, blockVoid, opBr, 0, opEnd})
	res := e.Run(context.Background(), runtime.Spec{Module: spin, Fuel: 100_000, Timeout: time.Hour})
	wantReason(t, res, runtime.ReasonOutOfFuel)
}

func TestReservedExportRefused(t *testing.T) {
	e := newExecutor(t, Config{})
	mod := testModule{
		types: []funcType{{}}, funcs: []testFunc{{}},
		exports: []testExport{{"_start", 0, 0}, {"palyra_start", 0, 0}},
	}.bytes()
	err := e.Validate(context.Background(), mod)
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("Validate = %v, want a reserved-name refusal", err)
	}
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: mod}), runtime.ReasonInvalidModule, "reserved")
}
