package fuel

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

func TestEmptyModuleGetsGlobalAndExport(t *testing.T) {
	out := instrument(t, mod())
	ctx := testCtx(t)
	rt := newRuntime(t, ctx)
	cm := compile(t, ctx, rt, out)
	m, err := rt.InstantiateModule(ctx, cm, wazeroConfig())
	if err != nil {
		t.Fatal(err)
	}
	g, ok := m.ExportedGlobal(GlobalExport).(api.MutableGlobal)
	if !ok {
		t.Fatalf("%s is not an exported mutable global", GlobalExport)
	}
	if g.Type() != api.ValueTypeI64 || g.Get() != 0 {
		t.Fatalf("fuel global: type %v value %d, want i64 0", g.Type(), g.Get())
	}
}

func TestInstrumentIsDeterministicAndLeavesInputAlone(t *testing.T) {
	in := testdata(t, "cwasi.wasm")
	orig := bytes.Clone(in)
	a := instrument(t, in)
	b := instrument(t, in)
	if !bytes.Equal(a, b) {
		t.Fatal("two instrumentations of one module differ")
	}
	if !bytes.Equal(in, orig) {
		t.Fatal("Instrument modified its input")
	}
	if _, err := Instrument(a, Options{}); !errors.Is(err, ErrReservedName) {
		t.Fatalf("instrumenting twice: got %v, want ErrReservedName", err)
	}
}

func TestCustomSections(t *testing.T) {
	custom := func(name, content string) []byte { return sec(secCustom, str(name), []byte(content)) }
	in := mod(
		custom("producers", "p"),
		sec(secType, vec(functype(nil, nil))),
		custom(".debug_info", "dwarf"),
		sec(secFunction, vec(u32(0))),
		sec(secCode, vec(body(noLocals, 0x0b))),
		custom("name", "\x01\x04\x01\x00\x01f"),
		custom("metadata.code.branch_hint", "x"),
	)
	out := instrument(t, in)
	for _, keep := range []string{"producers", "name"} {
		if !bytes.Contains(out, str(keep)) {
			t.Errorf("custom section %q dropped", keep)
		}
	}
	for _, drop := range []string{".debug_info", "metadata.code.branch_hint"} {
		if bytes.Contains(out, str(drop)) {
			t.Errorf("custom section %q kept although code offsets change", drop)
		}
	}
	ctx := testCtx(t)
	compile(t, ctx, newRuntime(t, ctx), out)

	// A name section whose counts are not backed by bytes would make the
	// runtime allocate gigabytes: it is dropped, the module kept.
	bad := mod(sec(secType, vec(functype(nil, nil))), custom("name", "\x01\x05\xff\xff\xff\xff\x0f"))
	out = instrument(t, bad)
	if bytes.Contains(out, str("name")) {
		t.Error("malformed name section kept")
	}
	compile(t, ctx, newRuntime(t, ctx), out)
}

// TestErrors feeds broken, unsupported and hostile modules: each is refused
// with the right sentinel and an offset, and none panics.
func TestErrors(t *testing.T) {
	typ := sec(secType, vec(functype(nil, nil)))
	fn := sec(secFunction, vec(u32(0)))
	code := func(c ...byte) []byte { return mod(typ, fn, sec(secCode, vec(body(noLocals, c...)))) }
	cases := []struct {
		name string
		in   []byte
		want error
		msg  string
	}{
		{"empty", nil, ErrMalformed, "magic"},
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), ErrMalformed, "magic"},
		{"component", []byte{0, 'a', 's', 'm', 0x0d, 0, 1, 0}, ErrUnsupported, "version"},
		{"truncated section", append(mod(), secType, 10, 1), ErrMalformed, "offset 9"},
		{"unknown section", mod(sec(14, nil)), ErrMalformed, "bad section id 14"},
		{"tag section", mod(sec(13, vec())), ErrUnsupported, "exception"},
		{"section order", mod(fn, typ), ErrMalformed, "order"},
		{"duplicate section", mod(typ, typ), ErrMalformed, "order"},
		{"huge type count", mod(sec(secType, u32(0xffffffff))), ErrMalformed, "count"},
		{"huge code count", mod(typ, fn, sec(secCode, u32(0xfffffff0))), ErrMalformed, "count"},
		{"gc type", mod(sec(secType, vec([]byte{0x5e, 0x7f, 0x01}))), ErrUnsupported, "type form"},
		{"bad type index", mod(typ, sec(secFunction, vec(u32(5)))), ErrMalformed, "type index"},
		{"body count mismatch", mod(typ, fn, sec(secCode, vec())), ErrMalformed, "bodies"},
		{"missing end", code(0x01), ErrMalformed, "final end"},
		{"bytes after end", code(0x0b, 0x01), ErrMalformed, "after the function"},
		{"else without if", code(0x02, 0x40, 0x05, 0x0b, 0x0b), ErrMalformed, "else"},
		{"branch depth", code(0x0c, 0x05, 0x0b), ErrMalformed, "branch depth"},
		{"atomics", code(0xfe, 0x00, 0x00, 0x00, 0x0b), ErrUnsupported, "unsupported opcode 0xfe at offset"},
		{"exceptions", code(0x06, 0x40, 0x0b, 0x0b), ErrUnsupported, "0x06"},
		{"tail call", code(0x12, 0x00, 0x0b), ErrUnsupported, "tail calls"},
		{"reserved opcode", code(0x27, 0x0b), ErrUnsupported, "0x27"},
		{"gc prefix", code(0xfb, 0x00, 0x0b), ErrUnsupported, "GC"},
		{"misc 18", code(0xfc, 18, 0x0b), ErrUnsupported, "0xfc 18"},
		{"simd gap", code(0xfd, 0x9a, 0x01, 0x0b), ErrUnsupported, "0xfd 0x9a"},
		{"padded simd opcode", code(0xfd, 0x80, 0x00, 0x00, 0x00, 0x1a, 0x0b), ErrUnsupported, "padded"},
		{"relaxed simd", code(0xfd, 0x80, 0x02, 0x0b), ErrUnsupported, "relaxed"},
		{"multi-memory memarg", code(0x41, 0x00, 0x28, 0x42, 0x00, 0x00, 0x1a, 0x0b), ErrUnsupported, "multi-memory"},
		{"multi-memory grow", code(0x41, 0x00, 0x40, 0x01, 0x1a, 0x0b), ErrUnsupported, "multi-memory"},
		{"typed ref block type", code(0x02, 0x63, 0x70, 0x0b, 0x0b), ErrUnsupported, "block type"},
		{"bad value type", mod(typ, fn, sec(secCode, vec(body(vec(cat(u32(1), []byte{0x69})), 0x0b)))), ErrUnsupported, "value type"},
		{"bad const", code(0x42, 0x80, 0x80, 0x0b), ErrMalformed, "offset"},
		{"truncated v128.const", code(0xfd, 0x0c, 1, 2, 3), ErrMalformed, "bytes"},
		{"reserved export fuel", mod(sec(secExport, vec(cat(str(GlobalExport), []byte{0x03}, u32(0))))), ErrReservedName, GlobalExport},
		{"reserved export start", mod(sec(secExport, vec(cat(str(StartExport), []byte{0x00}, u32(0))))), ErrReservedName, StartExport},
		{"tag import", mod(sec(secImport, vec(cat(str("m"), str("t"), []byte{0x04, 0x00, 0x00})))), ErrUnsupported, "tag import"},
		{"memory64 import", mod(sec(secImport, vec(cat(str("m"), str("mem"), []byte{0x02, 0x04, 0x01})))), ErrUnsupported, "memory64"},
		{"start trailing", mod(typ, fn, sec(secStart, u32(0), []byte{0}), sec(secCode, vec(body(noLocals, 0x0b)))), ErrMalformed, "trailing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := Instrument(c.in, Options{})
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if out != nil {
				t.Fatal("output returned with an error")
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q does not mention %q", err, c.msg)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	typ := sec(secType, vec(functype(nil, nil)))
	oneBody := func(b []byte) []byte { return mod(typ, sec(secFunction, vec(u32(0))), sec(secCode, vec(b))) }

	t.Run("module size", func(t *testing.T) {
		_, err := Instrument(make([]byte, 101), Options{MaxModuleSize: 100})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "module too large") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("nesting", func(t *testing.T) {
		code := bytes.Repeat([]byte{0x02, 0x40}, MaxNesting)
		code = append(code, bytes.Repeat([]byte{0x0b}, MaxNesting+1)...)
		_, err := Instrument(oneBody(body(noLocals, code...)), Options{})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "nested") {
			t.Fatalf("got %v", err)
		}
		// One level less is fine.
		code = bytes.Repeat([]byte{0x02, 0x40}, MaxNesting-1)
		code = append(code, bytes.Repeat([]byte{0x0b}, MaxNesting)...)
		if _, err := Instrument(oneBody(body(noLocals, code...)), Options{}); err != nil {
			t.Fatalf("nesting at the limit: %v", err)
		}
	})
	t.Run("locals", func(t *testing.T) {
		locals := vec(cat(u32(MaxLocals), []byte{0x7f}), cat(u32(1), []byte{0x7e}))
		_, err := Instrument(oneBody(body(locals, 0x0b)), Options{})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "locals") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("body size", func(t *testing.T) {
		code := append(bytes.Repeat([]byte{0x01}, MaxBodySize), 0x0b)
		_, err := Instrument(oneBody(body(noLocals, code...)), Options{})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "body") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("tables", func(t *testing.T) {
		table := func(min uint32) []byte { return cat([]byte{0x70, 0x00}, u32(min)) }
		_, err := Instrument(mod(sec(secTable, vec(table(MaxTableElements/2), table(MaxTableElements/2+1)))), Options{})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "tables") {
			t.Fatalf("got %v", err)
		}
		if _, err := Instrument(mod(sec(secTable, vec(table(MaxTableElements)))), Options{}); err != nil {
			t.Fatalf("table at the limit: %v", err)
		}
	})
	t.Run("functions", func(t *testing.T) {
		idx := bytes.Repeat([]byte{0x00}, MaxFunctions+1)
		_, err := Instrument(mod(typ, sec(secFunction, u32(MaxFunctions+1), idx)), Options{})
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "functions") {
			t.Fatalf("got %v", err)
		}
	})
}

// TestDeclaredCountsDoNotAllocate checks that a tiny module declaring
// billions of entries is refused without allocating for them.
func TestDeclaredCountsDoNotAllocate(t *testing.T) {
	inputs := [][]byte{
		mod(sec(secType, u32(0xffffffff))),
		mod(sec(secImport, u32(0xffffffff))),
		mod(sec(secType, vec(functype(nil, nil))), sec(secFunction, u32(0x0fffffff))),
		mod(sec(secExport, u32(0xffffffff))),
		mod(sec(secGlobal, u32(0xffffffff))),
		mod(sec(secTable, u32(0xffffffff))),
		mod(sec(secElement, u32(0xffffffff))),
		mod(sec(secElement, vec(cat([]byte{0x01, 0x00}, u32(0xffffffff))))),
		mod(sec(secData, u32(0xffffffff))),
		mod(sec(secData, vec(cat([]byte{0x01}, u32(0xffffffff))))),
		mod(sec(secCustom, str("x\xff"), []byte{})),
		mod(sec(secType, vec(cat([]byte{0x60}, u32(0xffffffff))))),
		mod(sec(secImport, vec(cat(u32(0xffffffff), []byte("m"))))),
		mod(sec(secType, vec(functype(nil, nil))), sec(secFunction, vec(u32(0))),
			sec(secCode, vec(body(u32(0xffffffff), 0x0b)))),
		mod(sec(secType, vec(functype(nil, nil))), sec(secFunction, vec(u32(0))),
			sec(secCode, vec(body(noLocals, 0x0e, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x0b)))),
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i, in := range inputs {
		if _, err := Instrument(in, Options{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("input %d: got %v, want ErrMalformed", i, err)
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("refusing tiny modules allocated %d bytes", grew)
	}
}
