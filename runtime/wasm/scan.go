package wasm

import (
	"errors"
	"fmt"
)

// wasmMagic and wasmVersion1 open every core WebAssembly 1.0/2.0 binary.
var (
	wasmMagic    = []byte{0x00, 'a', 's', 'm'}
	wasmVersion1 = []byte{0x01, 0x00, 0x00, 0x00}
)

// Implementation limits, checked before wazero sees a module. wazero sizes
// slices from counts it decodes (a 51-byte module declaring 2^28 imports
// made it allocate 28 GB and killed the process), so every count is bounded
// here first. The values follow the WebAssembly JS API's implementation
// limits, tighter where a count sizes a per-instance allocation (tables,
// element items).
const (
	maxTypes        = 1_000_000
	maxFunctions    = 1_000_000
	maxImports      = 100_000
	maxExports      = 100_000
	maxGlobals      = 1_000_000
	maxDataSegments = 100_000
	maxElemSegments = 100_000
	maxTables       = 4       // Go, clang and Rust emit one
	maxTableEntries = 1 << 20 // per table, initial or grown (8 bytes each per instance)
	maxElemItems    = 1 << 20 // sum over element segments
	maxParams       = 1_000
	maxResults      = 1_000
	maxLocals       = 50_000 // per function
	maxFunctionSize = 7_654_321
	maxNames        = maxFunctions // entries in one name subsection
)

// Section ids and import kinds of the binary format.
const (
	sectionCustom    = 0
	sectionType      = 1
	sectionImport    = 2
	sectionFunction  = 3
	sectionTable     = 4
	sectionMemory    = 5
	sectionGlobal    = 6
	sectionExport    = 7
	sectionStart     = 8
	sectionElement   = 9
	sectionCode      = 10
	sectionData      = 11
	sectionDataCount = 12
	sectionTag       = 13

	importFunc   = 0x00
	importTable  = 0x01
	importMemory = 0x02
	importGlobal = 0x03
	importTag    = 0x04
)

var sectionNames = map[byte]string{
	sectionCustom: "custom", sectionType: "type", sectionImport: "import", sectionFunction: "function",
	sectionTable: "table", sectionMemory: "memory", sectionGlobal: "global", sectionExport: "export",
	sectionStart: "start", sectionElement: "element", sectionCode: "code", sectionData: "data",
	sectionDataCount: "data count", sectionTag: "tag",
}

// importEntry is one import as the binary declares it.
type importEntry struct {
	Module, Name string
	Kind         byte
}

// kindName is the word a user would recognise for an import kind.
func (im importEntry) kindName() string {
	switch im.Kind {
	case importFunc:
		return "function"
	case importTable:
		return "table"
	case importMemory:
		return "memory"
	case importGlobal:
		return "global"
	case importTag:
		return "tag"
	}
	return fmt.Sprintf("kind 0x%02x", im.Kind)
}

// moduleLayout is what the executor needs from a module that wazero does
// not expose for unexported items: every import, and the initial size of
// the module's own memory.
type moduleLayout struct {
	Imports []importEntry
	// MemoryMinPages is the initial page count of the module's own memory
	// (0 when it defines none).
	MemoryMinPages uint32
}

// scanner walks a module's structure and bounds every count in it.
type scanner struct {
	out       moduleLayout
	elemItems int64
}

// scanModule checks a wasm binary's structure against the implementation
// limits and returns its layout. It reads every section except function
// bodies' instructions (wazero validates those), treats the bytes as
// hostile, and never panics. The header must already have been checked.
func scanModule(b []byte) (moduleLayout, error) {
	var s scanner
	if len(b) < 8 {
		return s.out, errTruncated
	}
	r := reader{b: b, off: 8}
	for !r.done() {
		id, err := r.byte()
		if err != nil {
			return s.out, err
		}
		body, err := r.sub()
		name := sectionNames[id]
		if name == "" {
			return s.out, fmt.Errorf("unknown section id %d", id)
		}
		if err != nil {
			return s.out, fmt.Errorf("%s section: %w", name, err)
		}
		if err := s.section(id, &body); err != nil {
			return s.out, fmt.Errorf("%s section: %w", name, err)
		}
		if !body.done() {
			return s.out, fmt.Errorf("%s section: %d bytes left over", name, body.left())
		}
	}
	return s.out, nil
}

func (s *scanner) section(id byte, r *reader) error {
	switch id {
	case sectionCustom:
		return scanCustom(r)
	case sectionType:
		return each(r, "types", maxTypes, 3, scanFuncType)
	case sectionImport:
		return each(r, "imports", maxImports, 4, s.scanImport)
	case sectionFunction:
		return each(r, "functions", maxFunctions, 1, func(r *reader) error { _, err := r.u32(); return err })
	case sectionTable:
		return each(r, "tables", maxTables, 3, s.scanTable)
	case sectionMemory:
		return each(r, "memories", 1, 2, func(r *reader) error {
			min, _, _, err := r.limits()
			s.out.MemoryMinPages = min
			return err
		})
	case sectionGlobal:
		return each(r, "globals", maxGlobals, 4, func(r *reader) error {
			if err := r.globaltype(); err != nil {
				return err
			}
			return r.constExpr()
		})
	case sectionExport:
		return each(r, "exports", maxExports, 3, func(r *reader) error {
			if _, err := r.name(); err != nil {
				return err
			}
			if _, err := r.byte(); err != nil {
				return err
			}
			_, err := r.u32()
			return err
		})
	case sectionStart:
		_, err := r.u32()
		return err
	case sectionElement:
		return each(r, "element segments", maxElemSegments, 2, s.scanElement)
	case sectionCode:
		return each(r, "function bodies", maxFunctions, 2, scanCode)
	case sectionData:
		return each(r, "data segments", maxDataSegments, 2, scanData)
	case sectionDataCount:
		n, err := r.u32()
		if err == nil && n > maxDataSegments {
			err = &limitError{what: "data segments", n: int64(n), limit: maxDataSegments}
		}
		return err
	case sectionTag:
		return errors.New("exception handling is not supported")
	}
	return fmt.Errorf("unknown section id %d", id)
}

// each reads a vector of at most limit items of at least minSize bytes.
func each(r *reader, what string, limit, minSize int, item func(*reader) error) error {
	n, err := r.count(what, limit, minSize)
	if err != nil {
		return err
	}
	for i := range n {
		if err := item(r); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return nil
}

func scanFuncType(r *reader) error {
	form, err := r.byte()
	if err != nil {
		return err
	}
	if form != 0x60 {
		return fmt.Errorf("unsupported type form 0x%02x (only function types are supported)", form)
	}
	for _, v := range []struct {
		what  string
		limit int
	}{{"parameters", maxParams}, {"results", maxResults}} {
		n, err := r.count(v.what, v.limit, 1)
		if err != nil {
			return err
		}
		for range n {
			if err := r.valtype(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *scanner) scanImport(r *reader) error {
	var im importEntry
	var err error
	if im.Module, err = r.name(); err != nil {
		return err
	}
	if im.Name, err = r.name(); err != nil {
		return err
	}
	if im.Kind, err = r.byte(); err != nil {
		return err
	}
	switch im.Kind {
	case importFunc:
		_, err = r.u32()
	case importTable:
		err = s.scanTable(r)
	case importMemory:
		_, _, _, err = r.limits()
	case importGlobal:
		err = r.globaltype()
	default:
		err = fmt.Errorf("unsupported import kind 0x%02x", im.Kind)
	}
	if err != nil {
		return err
	}
	s.out.Imports = append(s.out.Imports, im)
	return nil
}

// scanTable reads a table type. Its initial size must fit maxTableEntries;
// its maximum is capped to that by capTables before compiling, because
// wazero grows tables with ordinary Go allocations no memory limit sees.
func (s *scanner) scanTable(r *reader) error {
	if err := r.reftype(); err != nil {
		return err
	}
	min, _, _, err := r.limits()
	if err != nil {
		return err
	}
	if min > maxTableEntries {
		return &limitError{what: "initial table entries", n: int64(min), limit: maxTableEntries}
	}
	return nil
}

// scanElement reads an element segment in any of its eight encodings.
func (s *scanner) scanElement(r *reader) error {
	flags, err := r.u32()
	if err != nil {
		return err
	}
	if flags > 7 {
		return fmt.Errorf("unknown element segment flags %d", flags)
	}
	if flags&0b11 == 0b10 { // explicit table index
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	if flags&0b01 == 0 { // active: offset expression
		if err := r.constExpr(); err != nil {
			return err
		}
	}
	if flags&0b11 != 0 { // elemkind (0x00) or reftype
		if flags&0b100 != 0 {
			err = r.reftype()
		} else if kind, kerr := r.byte(); kerr != nil || kind != 0x00 {
			err = errors.Join(kerr, fmt.Errorf("unsupported element kind 0x%02x", kind))
		}
		if err != nil {
			return err
		}
	}
	n, err := r.count("element items", maxElemItems, 1)
	if err != nil {
		return err
	}
	s.elemItems += int64(n)
	if s.elemItems > maxElemItems {
		return &limitError{what: "element items", n: s.elemItems, limit: maxElemItems}
	}
	for range n {
		if flags&0b100 != 0 {
			err = r.constExpr()
		} else {
			_, err = r.u32()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// scanCode reads one function body's size and local declarations.
func scanCode(r *reader) error {
	size, err := r.u32()
	if err != nil {
		return err
	}
	if size > maxFunctionSize {
		return &limitError{what: "bytes in one function", n: int64(size), limit: maxFunctionSize}
	}
	b, err := r.bytes(int(size))
	if err != nil {
		return err
	}
	body := reader{b: b}
	groups, err := body.count("local groups", maxLocals, 2)
	if err != nil {
		return err
	}
	var locals int64
	for range groups {
		n, err := body.u32()
		if err != nil {
			return err
		}
		if locals += int64(n); locals > maxLocals {
			return &limitError{what: "locals in one function", n: locals, limit: maxLocals}
		}
		if err := body.valtype(); err != nil {
			return err
		}
	}
	if body.done() || b[len(b)-1] != 0x0b {
		return errors.New("function body does not end with end")
	}
	return nil
}

func scanData(r *reader) error {
	flags, err := r.u32()
	if err != nil {
		return err
	}
	switch flags {
	case 0:
		err = r.constExpr()
	case 1:
	case 2:
		if _, err = r.u32(); err == nil { // memory index
			err = r.constExpr()
		}
	default:
		err = fmt.Errorf("unknown data segment flags %d", flags)
	}
	if err != nil {
		return err
	}
	_, err = r.sub() // the bytes
	return err
}
