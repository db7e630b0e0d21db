package fuel

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// Section ids of the WebAssembly 2.0 binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
)

// sectionOrder is the position each non-custom section must take; the data
// count section sits between element and code.
var sectionOrder = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5,
	secGlobal: 6, secExport: 7, secStart: 8, secElement: 9,
	secDataCount: 10, secCode: 11, secData: 12,
}

var wasmHeader = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// section is one section of the input: its id and its payload, which
// aliases the input.
type section struct {
	id      byte
	payload []byte
	offset  int    // absolute offset of payload[0]
	name    string // custom sections only
}

// Instrument returns a copy of module with fuel metering added (see the
// package documentation for what the copy contains and how a host drives
// it). The input is not modified. Errors wrap ErrMalformed, ErrUnsupported,
// ErrLimit or ErrReservedName and name the offending offset.
func Instrument(module []byte, opts Options) ([]byte, error) {
	maxSize := opts.MaxModuleSize
	if maxSize <= 0 {
		maxSize = DefaultMaxModuleSize
	}
	if len(module) > maxSize {
		return nil, fmt.Errorf("fuel: %w: module too large: %d bytes, limit %d; shrink the module (strip debug info) or raise Options.MaxModuleSize",
			ErrLimit, len(module), maxSize)
	}
	sections, err := splitSections(module)
	if err != nil {
		return nil, err
	}
	info, err := analyze(sections)
	if err != nil {
		return nil, err
	}
	fuelGlobal := info.importedGlobals + info.definedGlobals

	out := make([]byte, 0, len(module)+len(module)/4+64)
	out = append(out, wasmHeader...)
	wroteGlobal, wroteExport := false, false
	for _, s := range sections {
		if s.id != secCustom {
			if !wroteGlobal && sectionOrder[s.id] > sectionOrder[secGlobal] {
				out = appendSection(out, secGlobal, globalSection(nil, 0))
				wroteGlobal = true
			}
			if !wroteExport && sectionOrder[s.id] > sectionOrder[secExport] {
				out = appendSection(out, secExport, exportSection(nil, 0, fuelGlobal, info))
				wroteExport = true
			}
		}
		switch s.id {
		case secCustom:
			if keepCustom(s) {
				out = appendSection(out, s.id, s.payload)
			}
		case secGlobal:
			r := newReader(s.payload, s.offset)
			n, _ := r.u32() // already checked by analyze
			out = appendSection(out, secGlobal, globalSection(s.payload[r.pos:], n))
			wroteGlobal = true
		case secExport:
			r := newReader(s.payload, s.offset)
			n, _ := r.u32() // already checked by analyze
			out = appendSection(out, secExport, exportSection(s.payload[r.pos:], n, fuelGlobal, info))
			wroteExport = true
		case secStart:
			// Dropped: the start function is exported as StartExport instead.
		case secCode:
			code, err := instrumentCode(info.bodies, fuelGlobal)
			if err != nil {
				return nil, err
			}
			out = appendSection(out, secCode, code)
		default:
			out = appendSection(out, s.id, s.payload)
		}
	}
	if !wroteGlobal {
		out = appendSection(out, secGlobal, globalSection(nil, 0))
	}
	if !wroteExport {
		out = appendSection(out, secExport, exportSection(nil, 0, fuelGlobal, info))
	}
	return out, nil
}

// splitSections checks the header and cuts the module into sections,
// enforcing the section order Instrument relies on when it inserts the
// global and export sections.
func splitSections(module []byte) ([]section, error) {
	if len(module) < len(wasmHeader) || !bytes.Equal(module[:4], wasmHeader[:4]) {
		return nil, malformedAt(0, "missing \\0asm magic; this is not a wasm binary")
	}
	if !bytes.Equal(module[4:8], wasmHeader[4:8]) {
		return nil, unsupportedAt(4, "binary version % x (components and pre-1.0 binaries are not core modules)", module[4:8])
	}
	r := newReader(module[8:], 8)
	var sections []section
	lastOrder := 0
	for r.remaining() > 0 {
		idOff := r.offset()
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.count(1, "section size")
		if err != nil {
			return nil, err
		}
		off := r.offset()
		payload, _ := r.bytes(size) // count checked size
		s := section{id: id, payload: payload, offset: off}
		if id == secCustom {
			r := newReader(payload, off)
			name, err := r.name()
			if err != nil {
				return nil, err
			}
			if !utf8.ValidString(name) {
				return nil, malformedAt(off, "custom section name is not UTF-8")
			}
			s.name = name
		} else {
			order, ok := sectionOrder[id]
			if !ok {
				if id == 13 {
					return nil, unsupportedAt(idOff, "tag section (exception handling)")
				}
				return nil, malformedAt(idOff, "bad section id %d", id)
			}
			if order <= lastOrder {
				return nil, malformedAt(idOff, "bad section order: section %d is duplicated or out of order", id)
			}
			lastOrder = order
		}
		sections = append(sections, s)
	}
	return sections, nil
}

func appendSection(out []byte, id byte, payload []byte) []byte {
	out = append(out, id)
	out = appendU32(out, uint32(len(payload)))
	return append(out, payload...)
}
