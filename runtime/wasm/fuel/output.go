package fuel

import "strings"

// globalSection returns a global section holding the n entries in entries
// followed by the fuel global: mutable i64 initialised to 0, so a host that
// forgets to set a budget gets an immediate out-of-fuel trap.
func globalSection(entries []byte, n uint32) []byte {
	out := appendU32(nil, n+1)
	out = append(out, entries...)
	return append(out, 0x7e, 0x01, 0x42, 0x00, 0x0b) // i64 mut (i64.const 0) end
}

// exportSection returns an export section holding the n entries in entries
// followed by the fuel global's export and, when the module had a start
// section, the start function's export.
func exportSection(entries []byte, n uint32, fuelGlobal uint32, info *moduleInfo) []byte {
	extra := uint32(1)
	if info.hasStart {
		extra++
	}
	out := appendU32(nil, n+extra)
	out = append(out, entries...)
	out = appendName(out, GlobalExport)
	out = append(out, 0x03) // global
	out = appendU32(out, fuelGlobal)
	if info.hasStart {
		out = appendName(out, StartExport)
		out = append(out, 0x00) // function
		out = appendU32(out, info.startFunc)
	}
	return out
}

func appendName(out []byte, name string) []byte {
	out = appendU32(out, uint32(len(name)))
	return append(out, name...)
}

// keepCustom drops custom sections that address code by byte offset (DWARF,
// branch hints): instrumentation moves code, so they would turn wrong. The
// name section is index-based and stays valid; it is dropped only when it
// is malformed, since the runtime decodes it and trusts its counts.
func keepCustom(s section) bool {
	if s.name == "name" {
		r := newReader(s.payload, s.offset)
		_, _ = r.name() // checked by splitSections
		return validNames(r)
	}
	return !strings.HasPrefix(s.name, ".debug_") && !strings.HasPrefix(s.name, "metadata.code.")
}
