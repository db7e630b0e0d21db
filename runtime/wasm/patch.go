package wasm

import (
	"errors"
	"fmt"
)

// capTables returns module with every table's maximum set to at most
// maxTableEntries (Go's wasip1 modules declare no maximum at all). wazero
// grows tables with Go allocations outside the memory limit, so an
// unbounded table.grow could ask for 32 GiB; capped, it fails with -1 like
// any refused growth. The module must have passed scanModule. It returns
// module itself when nothing needs changing.
func capTables(module []byte) ([]byte, error) {
	r := reader{b: module, off: 8}
	for !r.done() {
		start := r.off
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		body, err := r.sub()
		if err != nil {
			return nil, err
		}
		if id != sectionTable {
			continue
		}
		patched, changed, err := capTableSection(body)
		if err != nil || !changed {
			return module, err
		}
		out := make([]byte, 0, len(module)+len(patched)-len(body.b)+5)
		out = append(out, module[:start]...)
		out = append(out, sectionTable)
		out = appendULEB(out, uint32(len(patched)))
		out = append(out, patched...)
		return append(out, module[r.off:]...), nil
	}
	return module, nil
}

// capTableSection re-encodes a table section with capped maximums.
func capTableSection(r reader) (out []byte, changed bool, err error) {
	n, err := r.count("tables", maxTables, 3)
	if err != nil {
		return nil, false, err
	}
	out = appendULEB(nil, uint32(n))
	for range n {
		ref, err := r.byte()
		if err != nil {
			return nil, false, err
		}
		min, max, hasMax, err := r.limits()
		if err != nil {
			return nil, false, err
		}
		if min > maxTableEntries {
			return nil, false, fmt.Errorf("table of %d entries passed the scan", min)
		}
		if !hasMax || max > maxTableEntries {
			max, changed = maxTableEntries, true
		}
		out = append(out, ref, 0x01)
		out = appendULEB(out, min)
		out = appendULEB(out, max)
	}
	if !r.done() {
		return nil, false, errors.New("table section has trailing bytes")
	}
	return out, changed, nil
}

// appendULEB appends v as unsigned LEB128.
func appendULEB(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
