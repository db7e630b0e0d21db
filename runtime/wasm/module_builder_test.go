package wasm

import "bytes"

// A tiny WebAssembly binary writer for hand-built hostile and minimal test
// modules, so tests do not need wat2wasm.

type funcType struct{ params, results []byte }

type testImport struct {
	module, name string
	kind         byte   // importFunc, importMemory, ...
	typeIdx      uint32 // for functions
}

type testFunc struct {
	typeIdx uint32
	code    []byte // instructions, without locals and final end
}

type testExport struct {
	name string
	kind byte // 0 func, 2 memory
	idx  uint32
}

type testData struct {
	offset int32
	bytes  []byte
}

type testModule struct {
	types   []funcType
	imports []testImport
	funcs   []testFunc
	tables  [][]uint32 // funcref tables: {min} or {min, max}
	memory  []uint32   // nil: none; {min} or {min, max} in pages
	exports []testExport
	data    []testData // active segments in memory 0
}

const (
	i32 = 0x7f

	opUnreachable = 0x00
	opLoop        = 0x03
	opIf          = 0x04
	opEnd         = 0x0b
	opBr          = 0x0c
	opCall        = 0x10
	opDrop        = 0x1a
	opI32Load     = 0x28
	opMemoryGrow  = 0x40
	opI32Const    = 0x41
	opI32Eq       = 0x46
	blockVoid     = 0x40
)

func uleb(v uint32) []byte { return appendULEB(nil, v) }

func sleb(v int32) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

func wname(s string) []byte { return append(uleb(uint32(len(s))), s...) }

func vec(n int, items []byte) []byte { return append(uleb(uint32(n)), items...) }

func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, uleb(uint32(len(body)))...), body...)
}

func limitsBytes(l []uint32) []byte {
	if len(l) == 1 {
		return append([]byte{0x00}, uleb(l[0])...)
	}
	return append(append([]byte{0x01}, uleb(l[0])...), uleb(l[1])...)
}

func wasmHeader() []byte { return []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00} }

// vecOf prefixes b with its length (for subsections and byte vectors).
func vecOf(b []byte) []byte { return append(uleb(uint32(len(b))), b...) }

func (m testModule) bytes() []byte {
	out := wasmHeader()
	if len(m.types) > 0 {
		var b []byte
		for _, t := range m.types {
			b = append(b, 0x60)
			b = append(b, vec(len(t.params), t.params)...)
			b = append(b, vec(len(t.results), t.results)...)
		}
		out = append(out, section(1, vec(len(m.types), b))...)
	}
	if len(m.imports) > 0 {
		var b []byte
		for _, im := range m.imports {
			b = append(b, wname(im.module)...)
			b = append(b, wname(im.name)...)
			b = append(b, im.kind)
			switch im.kind {
			case importFunc:
				b = append(b, uleb(im.typeIdx)...)
			case importMemory:
				b = append(b, limitsBytes([]uint32{1})...)
			case importGlobal:
				b = append(b, i32, 0x00)
			}
		}
		out = append(out, section(2, vec(len(m.imports), b))...)
	}
	if len(m.funcs) > 0 {
		var b []byte
		for _, f := range m.funcs {
			b = append(b, uleb(f.typeIdx)...)
		}
		out = append(out, section(3, vec(len(m.funcs), b))...)
	}
	if len(m.tables) > 0 {
		var b []byte
		for _, t := range m.tables {
			b = append(b, 0x70)
			b = append(b, limitsBytes(t)...)
		}
		out = append(out, section(4, vec(len(m.tables), b))...)
	}
	if m.memory != nil {
		out = append(out, section(5, vec(1, limitsBytes(m.memory)))...)
	}
	if len(m.exports) > 0 {
		var b []byte
		for _, e := range m.exports {
			b = append(b, wname(e.name)...)
			b = append(b, e.kind)
			b = append(b, uleb(e.idx)...)
		}
		out = append(out, section(7, vec(len(m.exports), b))...)
	}
	if len(m.funcs) > 0 {
		var b []byte
		for _, f := range m.funcs {
			body := append([]byte{0x00}, f.code...) // no locals
			body = append(body, opEnd)
			b = append(b, uleb(uint32(len(body)))...)
			b = append(b, body...)
		}
		out = append(out, section(10, vec(len(m.funcs), b))...)
	}
	if len(m.data) > 0 {
		var b []byte
		for _, d := range m.data {
			b = append(b, 0x00, opI32Const)
			b = append(b, sleb(d.offset)...)
			b = append(b, opEnd)
			b = append(b, vecOf(d.bytes)...)
		}
		out = append(out, section(11, vec(len(m.data), b))...)
	}
	return out
}

// command is a module with one memory page and a _start running code.
func command(code ...byte) []byte {
	return testModule{
		types:   []funcType{{}},
		funcs:   []testFunc{{code: code}},
		memory:  []uint32{1},
		exports: []testExport{{"_start", 0, 0}, {"memory", 2, 0}},
	}.bytes()
}

// Hand-built modules used across tests.
var (
	trivialModule     = command()
	unreachableModule = command(opUnreachable)
	// recursionModule's _start calls itself forever.
	recursionModule = command(opCall, 0)
	// outOfBoundsModule loads from 128 KiB, past its single 64 KiB page.
	outOfBoundsModule = command(append(append([]byte{opI32Const}, sleb(128<<10)...), opI32Load, 2, 0, opDrop)...)
	// loopModule spins forever without calls.
	loopModule = command(opLoop, blockVoid, opBr, 0, opEnd)
)

// growModule grows memory by pages and, when trapOnFail, traps if the
// growth was refused; otherwise it ignores the refusal and exits normally.
func growModule(pages int32, trapOnFail bool) []byte {
	code := append([]byte{opI32Const}, sleb(pages)...)
	code = append(code, opMemoryGrow, 0x00)
	if !trapOnFail {
		return command(append(code, opDrop)...)
	}
	code = append(code, opI32Const)
	code = append(code, sleb(-1)...)
	code = append(code, opI32Eq, opIf, blockVoid, opUnreachable, opEnd)
	return command(code...)
}

// command2 is command with explicit local declarations (a vec of groups)
// before an empty body.
func command2(locals []byte) []byte {
	m := command()
	// Replace the code section: one body = locals + end.
	body := append(append([]byte{}, locals...), opEnd)
	code := section(10, vec(1, append(uleb(uint32(len(body))), body...)))
	i := bytes.LastIndexByte(m, 10) // the code section is last and its id is 10
	return append(m[:i:i], code...)
}

// tableGrowModule has a funcref table of one entry with no maximum and
// grows it by pages×64Ki entries, trapping if the growth is refused.
func tableGrowModule(by int32) []byte {
	code := []byte{0xd0, 0x70, opI32Const} // ref.null funcref
	code = append(code, sleb(by)...)
	code = append(code, 0xfc, 15, 0) // table.grow 0
	code = append(code, opI32Const)
	code = append(code, sleb(-1)...)
	code = append(code, opI32Eq, opIf, blockVoid, opUnreachable, opEnd)
	return testModule{
		types: []funcType{{}}, funcs: []testFunc{{code: code}}, tables: [][]uint32{{1}},
		exports: []testExport{{"_start", 0, 0}},
	}.bytes()
}

// writeModule writes msg to fd through WASI fd_write: once, then
// proc_exit(exitCode); or, when forever, again and again, ignoring errors
// (only the executor can stop it).
func writeModule(fd int32, msg string, forever bool, exitCode int32) []byte {
	const iovec, nwritten, buf = 0, 8, 16
	iov := []byte{buf, 0, 0, 0, 0, 0, 0, 0}
	iov[4], iov[5], iov[6], iov[7] = byte(len(msg)), byte(len(msg)>>8), byte(len(msg)>>16), byte(len(msg)>>24)

	var write []byte
	for _, v := range []int32{fd, iovec, 1, nwritten} {
		write = append(write, opI32Const)
		write = append(write, sleb(v)...)
	}
	write = append(write, opCall, 0, opDrop) // fd_write; drop the errno
	var code []byte
	if forever {
		code = append([]byte{opLoop, blockVoid}, write...)
		code = append(code, opBr, 0, opEnd)
	} else {
		code = append(write, opI32Const)
		code = append(code, sleb(exitCode)...)
		code = append(code, opCall, 1)
	}
	return testModule{
		types: []funcType{{params: []byte{i32, i32, i32, i32}, results: []byte{i32}}, {params: []byte{i32}}, {}},
		imports: []testImport{
			{module: wasiModule, name: "fd_write", kind: importFunc, typeIdx: 0},
			{module: wasiModule, name: "proc_exit", kind: importFunc, typeIdx: 1},
		},
		funcs:   []testFunc{{typeIdx: 2, code: code}},
		memory:  []uint32{1},
		exports: []testExport{{"_start", 0, 2}, {"memory", 2, 0}},
		data:    []testData{{offset: iovec, bytes: iov}, {offset: buf, bytes: []byte(msg)}},
	}.bytes()
}

// sleepModule asks WASI poll_oneoff to sleep on the monotonic clock for d
// nanoseconds, then returns.
func sleepModule(ns uint64) []byte {
	const sub, events, nevents = 64, 128, 192
	subscription := make([]byte, 48) // userdata 0, tag 0 (clock)
	subscription[16] = 1             // clock id: monotonic
	for i := range 8 {
		subscription[24+i] = byte(ns >> (8 * i)) // timeout, relative
	}
	var code []byte
	for _, v := range []int32{sub, events, 1, nevents} {
		code = append(code, opI32Const)
		code = append(code, sleb(v)...)
	}
	code = append(code, opCall, 0, opDrop)
	return testModule{
		types:   []funcType{{params: []byte{i32, i32, i32, i32}, results: []byte{i32}}, {}},
		imports: []testImport{{module: wasiModule, name: "poll_oneoff", kind: importFunc, typeIdx: 0}},
		funcs:   []testFunc{{typeIdx: 1, code: code}},
		memory:  []uint32{1},
		exports: []testExport{{"_start", 0, 1}, {"memory", 2, 0}},
		data:    []testData{{offset: sub, bytes: subscription}},
	}.bytes()
}

// procExitModule calls WASI proc_exit(code).
func procExitModule(code int32) []byte {
	body := append([]byte{opI32Const}, sleb(code)...)
	body = append(body, opCall, 0)
	return testModule{
		types:   []funcType{{params: []byte{i32}}, {}},
		imports: []testImport{{module: wasiModule, name: "proc_exit", kind: importFunc, typeIdx: 0}},
		funcs:   []testFunc{{typeIdx: 1, code: body}},
		memory:  []uint32{1},
		exports: []testExport{{"_start", 0, 1}, {"memory", 2, 0}},
	}.bytes()
}
