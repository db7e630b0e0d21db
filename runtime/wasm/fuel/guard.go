package fuel

import "fmt"

// The checks in this file read sections Instrument copies unchanged. They
// exist because wazero's decoder allocates from declared counts before it
// reads the entries (a 20-byte module declaring 2^32 globals or table
// elements makes it allocate gigabytes and die): a module Instrument
// accepts has every vector count backed by the bytes that follow it.

// MaxTableElements bounds the sum of the initial sizes of the tables a
// module defines; wazero allocates them eagerly at instantiation.
const MaxTableElements = 1 << 22

func readTables(r *reader) error {
	n, err := r.count(3, "table")
	if err != nil {
		return err
	}
	var total uint64
	for range n {
		off := r.offset()
		if r.remaining() > 0 && r.buf[r.pos] == 0x40 {
			return unsupportedAt(off, "table with an initializer (typed function references)")
		}
		if err := readRefType(r); err != nil {
			return err
		}
		min, err := readLimitsMin(r)
		if err != nil {
			return err
		}
		total += uint64(min)
		if total > MaxTableElements {
			return fmt.Errorf("fuel: %w at offset %d: tables declare more than %d initial elements", ErrLimit, off, MaxTableElements)
		}
	}
	return trailing(r, "table")
}

func readMemories(r *reader) error {
	n, err := r.count(2, "memory")
	if err != nil {
		return err
	}
	for range n {
		if err := readLimits(r); err != nil {
			return err
		}
	}
	return trailing(r, "memory")
}

// readElements reads the element section's eight segment forms.
func readElements(r *reader) error {
	n, err := r.count(2, "element segment")
	if err != nil {
		return err
	}
	for range n {
		off := r.offset()
		flags, err := r.u32()
		if err != nil {
			return err
		}
		if flags > 7 {
			return malformedAt(off, "bad element segment flags %d", flags)
		}
		if flags&3 == 2 { // active with an explicit table index
			if _, err := r.u32(); err != nil {
				return err
			}
		}
		if flags&1 == 0 { // active: offset expression
			if err := readConstExpr(r); err != nil {
				return err
			}
		}
		if flags&3 != 0 { // element kind (0x00) or reference type
			if flags&4 == 0 {
				if err := r.expectElemKind(); err != nil {
					return err
				}
			} else if err := readRefType(r); err != nil {
				return err
			}
		}
		if flags&4 == 0 { // function indices
			m, err := r.count(1, "element")
			if err != nil {
				return err
			}
			for range m {
				if _, err := r.u32(); err != nil {
					return err
				}
			}
		} else { // expressions
			m, err := r.count(2, "element expression")
			if err != nil {
				return err
			}
			for range m {
				if err := readConstExpr(r); err != nil {
					return err
				}
			}
		}
	}
	return trailing(r, "element")
}

func (r *reader) expectElemKind() error {
	off := r.offset()
	b, err := r.byte()
	if err != nil {
		return err
	}
	if b != 0x00 {
		return malformedAt(off, "bad element kind 0x%02x", b)
	}
	return nil
}

func readData(r *reader) error {
	n, err := r.count(2, "data segment")
	if err != nil {
		return err
	}
	for range n {
		off := r.offset()
		flags, err := r.u32()
		if err != nil {
			return err
		}
		switch flags {
		case 0:
			err = readConstExpr(r)
		case 1:
		case 2:
			if _, err = r.u32(); err == nil {
				err = readConstExpr(r)
			}
		default:
			return malformedAt(off, "bad data segment flags %d", flags)
		}
		if err != nil {
			return err
		}
		size, err := r.count(1, "data segment size")
		if err != nil {
			return err
		}
		if err := r.skip(size); err != nil {
			return err
		}
	}
	return trailing(r, "data")
}

// readConstExpr reads a constant expression up to its end. It accepts any
// non-control instruction; which ones are constant is the runtime's call.
func readConstExpr(r *reader) error {
	for {
		off := r.offset()
		op, err := r.byte()
		if err != nil {
			return err
		}
		if op == 0x0b {
			return nil
		}
		if op <= 0x11 {
			return malformedAt(off, "control instruction 0x%02x in a constant expression", op)
		}
		if _, err := skipImmediates(r, op, off); err != nil {
			return err
		}
	}
}

// validNames reports whether a "name" custom section's content (after its
// name) is well formed with every count backed by bytes. A section that is
// not is dropped rather than handed to the runtime.
func validNames(r *reader) bool {
	for r.remaining() > 0 {
		id, err := r.byte()
		if err != nil {
			return false
		}
		size, err := r.count(1, "name subsection size")
		if err != nil {
			return false
		}
		sub, _ := r.bytes(size)
		sr := newReader(sub, 0)
		switch id {
		case 0: // module name
			_, err = sr.name()
		case 1: // function names
			err = readNameMap(sr)
		case 2: // local names
			var n int
			if n, err = sr.count(2, "function"); err == nil {
				for i := 0; i < n && err == nil; i++ {
					if _, err = sr.u32(); err == nil {
						err = readNameMap(sr)
					}
				}
			}
		default: // other subsections are skipped by size
			continue
		}
		if err != nil || sr.remaining() != 0 {
			return false
		}
	}
	return true
}

func readNameMap(r *reader) error {
	n, err := r.count(2, "name")
	if err != nil {
		return err
	}
	for range n {
		if _, err := r.u32(); err != nil {
			return err
		}
		if _, err := r.name(); err != nil {
			return err
		}
	}
	return nil
}

// readLimitsMin reads limits and returns the minimum.
func readLimitsMin(r *reader) (uint32, error) {
	off := r.offset()
	flags, err := r.byte()
	if err != nil {
		return 0, err
	}
	if flags > 3 {
		return 0, unsupportedAt(off, "limits flags 0x%02x (memory64 or custom page sizes)", flags)
	}
	min, err := r.u32()
	if err != nil {
		return 0, err
	}
	if flags&1 != 0 {
		_, err = r.u32()
	}
	return min, err
}
