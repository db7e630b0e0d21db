package fuel

import (
	"fmt"
	"math"
)

// moduleInfo is what Instrument needs to know about the module before it
// rewrites the code section.
type moduleInfo struct {
	paramCounts     []uint32 // per type index
	funcTypes       []uint32 // type index per defined function
	importedGlobals uint32
	definedGlobals  uint32
	hasStart        bool
	startFunc       uint32
	bodies          []funcBody
	reserved        error // an export already uses one of our names
}

// analyze reads every non-custom section: what Instrument needs to know,
// and every count the runtime would allocate from (see guard.go).
func analyze(sections []section) (*moduleInfo, error) {
	info := &moduleInfo{}
	for _, s := range sections {
		r := newReader(s.payload, s.offset)
		var err error
		switch s.id {
		case secType:
			err = readTypes(r, info)
		case secImport:
			err = readImports(r, info)
		case secFunction:
			err = readFunctions(r, info)
		case secGlobal:
			err = readGlobalCount(r, info)
		case secExport:
			err = checkExports(r, info)
		case secTable:
			err = readTables(r)
		case secMemory:
			err = readMemories(r)
		case secStart:
			if info.startFunc, err = r.u32(); err == nil {
				err = trailing(r, "start")
			}
			info.hasStart = true
		case secElement:
			err = readElements(r)
		case secDataCount:
			if _, err = r.u32(); err == nil {
				err = trailing(r, "data count")
			}
		case secCode:
			info.bodies, err = readCode(s, info)
		case secData:
			err = readData(r)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(info.funcTypes) > 0 && info.bodies == nil {
		return nil, malformedAt(0, "function section declares %d functions but there is no code section", len(info.funcTypes))
	}
	if info.reserved != nil {
		return nil, info.reserved // reported last: every other check has run
	}
	return info, nil
}

func readTypes(r *reader, info *moduleInfo) error {
	n, err := r.count(3, "type")
	if err != nil {
		return err
	}
	info.paramCounts = make([]uint32, 0, n)
	for range n {
		off := r.offset()
		form, err := r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return unsupportedAt(off, "type form 0x%02x (only function types 0x60; GC types are not supported)", form)
		}
		params, err := readValTypes(r, "parameter")
		if err != nil {
			return err
		}
		if _, err := readValTypes(r, "result"); err != nil {
			return err
		}
		info.paramCounts = append(info.paramCounts, uint32(params))
	}
	return trailing(r, "type")
}

// readValTypes reads a vector of value types and returns its length.
func readValTypes(r *reader, what string) (int, error) {
	n, err := r.count(1, what)
	if err != nil {
		return 0, err
	}
	for range n {
		if err := readValType(r); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func readValType(r *reader) error {
	off := r.offset()
	t, err := r.byte()
	if err != nil {
		return err
	}
	if !isValType(t) {
		return laterTypes(unsupportedAt(off, "value type 0x%02x", t))
	}
	return nil
}

// isValType reports whether t is a WebAssembly 2.0 value type:
// i32 i64 f32 f64 v128 funcref externref.
func isValType(t byte) bool {
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return true
	}
	return false
}

func readImports(r *reader, info *moduleInfo) error {
	n, err := r.count(4, "import")
	if err != nil {
		return err
	}
	for range n {
		if _, err := r.name(); err != nil {
			return err
		}
		if _, err := r.name(); err != nil {
			return err
		}
		off := r.offset()
		kind, err := r.byte()
		if err != nil {
			return err
		}
		switch kind {
		case 0x00: // function
			_, err = r.u32()
		case 0x01: // table
			if err = readRefType(r); err == nil {
				err = readLimits(r)
			}
		case 0x02: // memory
			err = readLimits(r)
		case 0x03: // global
			if err = readValType(r); err == nil {
				_, err = r.byte() // mutability; validated by the runtime
			}
			info.importedGlobals++
		case 0x04:
			return unsupportedAt(off, "tag import (exception handling)")
		default:
			return malformedAt(off, "bad import kind 0x%02x", kind)
		}
		if err != nil {
			return err
		}
	}
	return trailing(r, "import")
}

func readRefType(r *reader) error {
	off := r.offset()
	t, err := r.byte()
	if err != nil {
		return err
	}
	if t != 0x70 && t != 0x6f {
		return laterTypes(unsupportedAt(off, "reference type 0x%02x", t))
	}
	return nil
}

// readLimits reads table or memory limits: flags 0/1 (no max / max) and
// 2/3, the threads proposal's shared variants, which the runtime judges.
func readLimits(r *reader) error {
	_, err := readLimitsMin(r)
	return err
}

func readFunctions(r *reader, info *moduleInfo) error {
	off := r.offset()
	n, err := r.count(1, "function")
	if err != nil {
		return err
	}
	if n > MaxFunctions {
		return fmt.Errorf("fuel: %w at offset %d: %d functions, limit %d", ErrLimit, off, n, MaxFunctions)
	}
	info.funcTypes = make([]uint32, 0, n)
	for range n {
		off := r.offset()
		t, err := r.u32()
		if err != nil {
			return err
		}
		if int(t) >= len(info.paramCounts) {
			return malformedAt(off, "function type index %d out of range (%d types)", t, len(info.paramCounts))
		}
		info.funcTypes = append(info.funcTypes, t)
	}
	return trailing(r, "function")
}

// readGlobalCount reads only the number of defined globals: the entries are
// copied unchanged and the new global goes after them.
func readGlobalCount(r *reader, info *moduleInfo) error {
	n, err := r.count(3, "global")
	if err != nil {
		return err
	}
	if uint64(n)+uint64(info.importedGlobals) >= math.MaxUint32 {
		return r.malformed("too many globals")
	}
	info.definedGlobals = uint32(n)
	return nil
}

// checkExports reads the exports and notes whether one already uses one of
// our names.
func checkExports(r *reader, info *moduleInfo) error {
	n, err := r.count(3, "export")
	if err != nil {
		return err
	}
	for range n {
		off := r.offset()
		name, err := r.name()
		if err != nil {
			return err
		}
		if (name == GlobalExport || name == StartExport) && info.reserved == nil {
			info.reserved = fmt.Errorf("fuel: %w at offset %d: the module already exports %q; rename that export", ErrReservedName, off, name)
		}
		if _, err := r.byte(); err != nil { // kind; validated by the runtime
			return err
		}
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	if n+2 > math.MaxUint32 {
		return r.malformed("too many exports")
	}
	return trailing(r, "export")
}

func trailing(r *reader, what string) error {
	if r.remaining() != 0 {
		return r.malformed("bad section %s: %d trailing bytes", what, r.remaining())
	}
	return nil
}
