package fuel

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

// call is one export call used to compare metered and unmetered runs.
type call struct {
	fn     string
	params []uint64
}

func (c call) String() string { return fmt.Sprintf("%s%v", c.fn, c.params) }

// TestResultsMatchUninstrumented runs every fixture export with and without
// instrumentation and requires identical results, errors and memory.
func TestResultsMatchUninstrumented(t *testing.T) {
	f64 := api.EncodeF64
	neg := func(v int64) uint64 { return uint64(v) }
	fixtures := map[string][]call{
		"loops.wasm": {
			{"count", []uint64{0}}, {"count", []uint64{1}}, {"count", []uint64{777}},
			{"fib", []uint64{12}}, {"dead", []uint64{0}}, {"dead", []uint64{1}},
			{"dispatch", []uint64{0}}, {"dispatch", []uint64{1}}, {"dispatch", []uint64{7}}, {"dispatch", []uint64{5000}},
			{"squares", []uint64{300}}, {"get_g", nil},
		},
		"features.wasm": {
			{"multi", []uint64{5, 3}}, {"multi", []uint64{neg(-9), 1 << 31}},
			{"numeric", []uint64{neg(-12345678901), f64(1234.75)}}, {"numeric", []uint64{0xff, f64(-1e300)}},
			{"bulk", []uint64{0}}, {"bulk", []uint64{20}}, {"deadbulk", nil},
			{"fill", []uint64{4000}}, {"fill", []uint64{70000}}, // the second traps out of bounds
			{"tables", nil}, {"simd", nil}, {"counter", nil},
		},
		"bench.wasm": {{"run", []uint64{2}}},
	}
	for name, calls := range fixtures {
		t.Run(name, func(t *testing.T) {
			p := newPair(t, testdata(t, name))
			for _, c := range calls {
				spec := runSpec{fn: c.fn, params: c.params}
				want := p.unmetered(t, spec)
				got := p.meter(t, big, spec)
				if !slices.Equal(got.results, want.results) {
					t.Errorf("%v: results %v, want %v", c, got.results, want.results)
				}
				if (got.err == nil) != (want.err == nil) {
					t.Errorf("%v: error %v, want %v", c, got.err, want.err)
				}
				if !bytes.Equal(got.memory, want.memory) {
					t.Errorf("%v: memory differs", c)
				}
				if IsOutOfFuel(got.err, got.remaining) {
					t.Errorf("%v: ran out of a budget of %d", c, big)
				}
			}
		})
	}
}

// TestCountingLoopFuel pins the cost model on a loop whose cost is known by
// hand: 14 units per iteration (the loop header's block, br_if through br),
// charged once more for the exiting iteration, plus 1 after the loop.
func TestCountingLoopFuel(t *testing.T) {
	p := newPair(t, testdata(t, "loops.wasm"))
	for _, n := range []uint64{0, 1, 2, 10, 100, 1000, 12345} {
		spec := runSpec{fn: "count", params: []uint64{n}}
		first := p.used(t, spec)
		for range 2 {
			if again := p.used(t, spec); again != first {
				t.Fatalf("count(%d): used %d, then %d", n, first, again)
			}
		}
		if want := 14*int64(n) + 15; first != want {
			t.Errorf("count(%d): used %d, want %d", n, first, want)
		}
	}
}

func TestFuelGrowsLinearlyWithWork(t *testing.T) {
	p := newPair(t, testdata(t, "loops.wasm"))
	used := func(n uint64) int64 { return p.used(t, runSpec{fn: "squares", params: []uint64{n}}) }
	base, step := used(1), used(2)-used(1)
	if step <= 0 {
		t.Fatalf("one more iteration cost %d", step)
	}
	for _, n := range []uint64{3, 10, 1000, 16000} {
		if got, want := used(n), base+step*int64(n-1); got != want {
			t.Errorf("squares(%d): used %d, want %d", n, got, want)
		}
	}
}

func TestInfiniteLoopRunsOutOfFuel(t *testing.T) {
	p := newPair(t, testdata(t, "loops.wasm"))
	for _, budget := range []int64{0, 1, 1000, 5_000_000} {
		o := p.meter(t, budget, runSpec{fn: "spin"})
		if o.err == nil {
			t.Fatalf("spin with budget %d returned", budget)
		}
		if !IsOutOfFuel(o.err, o.remaining) {
			t.Fatalf("budget %d: %v with %d left is not out of fuel", budget, o.err, o.remaining)
		}
		// `loop br 0 end` costs 1 per iteration: the trap comes exactly
		// when the global first goes negative.
		if o.remaining != -1 || Used(budget, o.remaining) != budget+1 {
			t.Fatalf("budget %d: %d left", budget, o.remaining)
		}
		if err := RunError(o.err, o.remaining); !errors.Is(err, ErrOutOfFuel) || !errors.Is(err, o.err) {
			t.Fatalf("RunError = %v", err)
		}
	}
}

func TestRecursionRunsOutOfFuel(t *testing.T) {
	p := newPair(t, testdata(t, "loops.wasm"))
	o := p.meter(t, 4000, runSpec{fn: "recurse", params: []uint64{0}})
	if !IsOutOfFuel(o.err, o.remaining) {
		t.Fatalf("recurse: %v with %d left", o.err, o.remaining)
	}
}

func TestBudgetBoundary(t *testing.T) {
	p := newPair(t, testdata(t, "loops.wasm"))
	for _, c := range []call{{"fib", []uint64{15}}, {"dispatch", []uint64{999}}, {"count", []uint64{50}}} {
		spec := runSpec{fn: c.fn, params: c.params}
		need := p.used(t, spec)
		want := p.unmetered(t, spec).results
		for _, budget := range []int64{need, need + 1, need * 2} {
			o := p.meter(t, budget, spec)
			if o.err != nil || !slices.Equal(o.results, want) {
				t.Fatalf("%v with budget %d (needs %d): %v %v", c, budget, need, o.results, o.err)
			}
			if o.remaining != budget-need {
				t.Fatalf("%v: %d left of %d, want %d", c, o.remaining, budget, budget-need)
			}
		}
		for _, budget := range []int64{need - 1, need / 2, 0} {
			o := p.meter(t, budget, spec)
			if !IsOutOfFuel(o.err, o.remaining) {
				t.Fatalf("%v with budget %d (needs %d): %v, %d left", c, budget, need, o.err, o.remaining)
			}
		}
	}
}

func TestUnsetBudgetTrapsAtOnce(t *testing.T) {
	p := newPair(t, testdata(t, "loops.wasm"))
	m, err := p.rt.InstantiateModule(p.ctx, p.metered, wazeroConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(p.ctx)
	_, err = m.ExportedFunction("count").Call(p.ctx, 10)
	left := int64(m.ExportedGlobal(GlobalExport).Get())
	if !IsOutOfFuel(err, left) {
		t.Fatalf("count without a budget: %v, %d left", err, left)
	}
}

func TestOtherTrapIsNotOutOfFuel(t *testing.T) {
	p := newPair(t, testdata(t, "features.wasm"))
	o := p.meter(t, big, runSpec{fn: "fill", params: []uint64{70000}})
	if o.err == nil || o.remaining < 0 || IsOutOfFuel(o.err, o.remaining) {
		t.Fatalf("out-of-bounds fill: %v, %d left", o.err, o.remaining)
	}
	if err := RunError(o.err, o.remaining); errors.Is(err, ErrOutOfFuel) || err != o.err {
		t.Fatalf("RunError = %v", err)
	}
	if err := RunError(nil, 5); err != nil {
		t.Fatalf("RunError(nil) = %v", err)
	}
}

// TestBulkOperationsChargeBySize checks memory.fill pays one unit per 64
// bytes on top of its static cost.
func TestBulkOperationsChargeBySize(t *testing.T) {
	p := newPair(t, testdata(t, "features.wasm"))
	used := func(n uint64) int64 { return p.used(t, runSpec{fn: "fill", params: []uint64{n}}) }
	zero := used(0)
	for n, extra := range map[uint64]int64{63: 0, 64: 1, 6400: 100, 65535: 1023, 65536: 1024} {
		if got := used(n) - zero; got != extra {
			t.Errorf("fill(%d) cost %d more than fill(0), want %d", n, got, extra)
		}
	}
}

// TestStartFunctionRunsUnderBudget checks the start section becomes the
// StartExport export, so the host meters it.
func TestStartFunctionRunsUnderBudget(t *testing.T) {
	p := newPair(t, testdata(t, "features.wasm"))
	m, err := p.rt.InstantiateModule(p.ctx, p.metered, wazeroConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(p.ctx)
	m.ExportedGlobal(GlobalExport).(api.MutableGlobal).Set(100)
	counter := func() uint64 {
		r, err := m.ExportedFunction("counter").Call(p.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	if c := counter(); c != 0 {
		t.Fatalf("start function ran during instantiation (counter %d)", c)
	}
	start := m.ExportedFunction(StartExport)
	if start == nil {
		t.Fatalf("no %s export", StartExport)
	}
	if _, err := start.Call(p.ctx); err != nil {
		t.Fatal(err)
	}
	if c := counter(); c != 1 {
		t.Fatalf("counter %d after %s", c, StartExport)
	}

	// A start function that never returns no longer hangs instantiation;
	// called under a budget it runs out of fuel.
	spin := mod(
		sec(secType, vec(functype(nil, nil))),
		sec(secFunction, vec(u32(0))),
		sec(secStart, u32(0)),
		sec(secCode, vec(body(noLocals, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b))),
	)
	cm := compile(t, p.ctx, p.rt, instrument(t, spin))
	o := run(t, p.ctx, p.rt, cm, runSpec{metered: true, budget: 1000, fn: StartExport})
	if !IsOutOfFuel(o.err, o.remaining) {
		t.Fatalf("spinning start: %v, %d left", o.err, o.remaining)
	}
}

// TestFuelGlobalIndexWithImports checks the appended global gets the index
// after imported and defined globals: features.wasm imports two globals
// (one mutable, which the guest adds into its result) and defines two.
func TestFuelGlobalIndexWithImports(t *testing.T) {
	p := newPair(t, testdata(t, "features.wasm"))
	spec := runSpec{fn: "numeric", params: []uint64{1, api.EncodeF64(2)}}
	want := p.unmetered(t, spec)
	for _, budget := range []int64{1000, 1 << 40} {
		o := p.meter(t, budget, spec)
		if o.err != nil || !slices.Equal(o.results, want.results) {
			t.Fatalf("budget %d: %v %v, want %v", budget, o.results, o.err, want.results)
		}
		if u := Used(budget, o.remaining); u <= 0 || u > 100 {
			t.Fatalf("budget %d: used %d", budget, u)
		}
	}
}

// TestCWASIGuest runs a C program built against wasi-libc (qsort, printf,
// malloc): identical output, deterministic fuel, and a budget just short
// of its need stops it.
func TestCWASIGuest(t *testing.T) {
	p := newPair(t, testdata(t, "cwasi.wasm"))
	spec := runSpec{stdin: "20000\n"}
	want := p.unmetered(t, spec)
	if want.err != nil || want.stdout == "" {
		t.Fatalf("unmetered: %q %v", want.stdout, want.err)
	}
	first := p.meter(t, big, spec)
	second := p.meter(t, big, spec)
	if first.err != nil || first.stdout != want.stdout || second.stdout != want.stdout {
		t.Fatalf("metered output %q (%v), want %q", first.stdout, first.err, want.stdout)
	}
	if first.remaining != second.remaining {
		t.Fatalf("fuel differs between runs: %d vs %d", Used(big, first.remaining), Used(big, second.remaining))
	}
	need := Used(big, first.remaining)
	if o := p.meter(t, need, spec); o.err != nil || o.stdout != want.stdout {
		t.Fatalf("exact budget: %v", o.err)
	}
	if o := p.meter(t, need-1, spec); !IsOutOfFuel(o.err, o.remaining) {
		t.Fatalf("budget one short: %v, %d left", o.err, o.remaining)
	}
	if more := p.used(t, runSpec{stdin: "40000\n"}); more <= need {
		t.Fatalf("twice the input used %d, not more than %d", more, need)
	}
}
