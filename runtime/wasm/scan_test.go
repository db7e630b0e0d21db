package wasm

import (
	"testing"
)

func TestScanModule(t *testing.T) {
	mod := testModule{
		types:   []funcType{{params: []byte{i32}}, {}},
		imports: []testImport{{module: wasiModule, name: "proc_exit", kind: importFunc}, {module: "env", name: "m", kind: importMemory}, {module: "env", name: "g", kind: importGlobal}},
		funcs:   []testFunc{{typeIdx: 1}},
		memory:  []uint32{7, 9},
		exports: []testExport{{"_start", 0, 1}},
	}.bytes()
	layout, err := scanModule(mod)
	if err != nil {
		t.Fatal(err)
	}
	if layout.MemoryMinPages != 7 {
		t.Errorf("MemoryMinPages = %d, want 7", layout.MemoryMinPages)
	}
	want := []importEntry{{wasiModule, "proc_exit", importFunc}, {"env", "m", importMemory}, {"env", "g", importGlobal}}
	if len(layout.Imports) != len(want) {
		t.Fatalf("Imports = %+v, want %+v", layout.Imports, want)
	}
	for i := range want {
		if layout.Imports[i] != want[i] {
			t.Errorf("import %d = %+v, want %+v", i, layout.Imports[i], want[i])
		}
	}
	// Every truncation is an error, never a panic or a silent success with
	// a section cut short.
	for n := 8; n < len(mod); n++ {
		if _, err := scanModule(mod[:n]); err == nil {
			// Cutting exactly between sections is a valid shorter module.
			if !sectionBoundary(mod, n) {
				t.Errorf("scanModule(first %d bytes) succeeded", n)
			}
		}
	}
}

// sectionBoundary reports whether n is the end of a section in mod.
func sectionBoundary(mod []byte, n int) bool {
	r := reader{b: mod, off: 8}
	for r.off < n {
		if _, err := r.byte(); err != nil {
			return false
		}
		size, err := r.u32()
		if err != nil {
			return false
		}
		r.off += int(size)
	}
	return r.off == n
}

func TestReaderU32(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want uint32
		ok   bool
	}{
		{[]byte{0x00}, 0, true},
		{[]byte{0xe5, 0x8e, 0x26}, 624485, true},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 0xffffffff, true},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x1f}, 0, false}, // > 32 bits
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 0, false},
		{[]byte{0x80}, 0, false},
	} {
		r := reader{b: tc.in}
		got, err := r.u32()
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("u32(% x) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
