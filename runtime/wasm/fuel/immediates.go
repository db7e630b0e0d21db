package fuel

import (
	"errors"
	"fmt"
)

// errAmbiguous marks encodings the spec allows but wazero decodes
// differently from it; they are refused so that the instructions we meter
// are the instructions that run.
var errAmbiguous = errors.New("encoding wazero reads differently")

// skipImmediates reads the immediates of every non-control instruction of
// WebAssembly 2.0 whose opcode byte op was just read at module offset off.
// It reports whether the instruction is a bulk operation that gets a
// run-time charge. Any opcode it does not know is refused: a guess would
// desynchronise the walk and misplace every later charge.
func skipImmediates(r *reader, op byte, off int) (bulk bool, err error) {
	switch {
	case op == 0x10: // call funcidx
		_, err = r.u32()
	case op == 0x11: // call_indirect typeidx tableidx
		if _, err = r.u32(); err == nil {
			_, err = r.u32()
		}
	case op == 0x1a || op == 0x1b: // drop, select
	case op == 0x1c: // select t*
		var n int
		if n, err = r.count(1, "select type"); err == nil {
			for i := 0; i < n && err == nil; i++ {
				err = readValType(r)
			}
		}
	case op >= 0x20 && op <= 0x26: // local.get/set/tee, global.get/set, table.get/set
		_, err = r.u32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		err = readMemArg(r)
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		err = r.expectZero("memory.size/grow")
	case op == 0x41:
		_, err = r.s32()
	case op == 0x42:
		_, err = r.s64()
	case op == 0x43:
		err = r.skip(4)
	case op == 0x44:
		err = r.skip(8)
	case op >= 0x45 && op <= 0xc4: // numeric, including sign extension
	case op == 0xd0: // ref.null t
		err = readRefType(r)
	case op == 0xd1: // ref.is_null
	case op == 0xd2: // ref.func funcidx
		_, err = r.u32()
	case op == 0xfc:
		return skipMisc(r, off)
	case op == 0xfd:
		err = skipSIMD(r, off)
	default:
		err = unsupportedOpcode(off, fmt.Sprintf("0x%02x", op), opcodeHint(op))
	}
	return false, err
}

// opcodeHint names the proposal an unsupported opcode belongs to.
func opcodeHint(op byte) string {
	switch {
	case op >= 0x06 && op <= 0x0a, op == 0x18, op == 0x19, op == 0x1f:
		return " (exception handling)"
	case op == 0x12 || op == 0x13 || op == 0x14 || op == 0x15:
		return " (tail calls or typed function references)"
	case op >= 0xd3 && op <= 0xd6, op == 0xfb:
		return " (typed function references or GC)"
	case op == 0xfe:
		return " (threads/atomics)"
	}
	return ""
}

// readMemArg reads alignment and offset. Bit 6 of the alignment announces a
// memory index (multi-memory), which WebAssembly 2.0 does not have.
func readMemArg(r *reader) error {
	off := r.offset()
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		return unsupportedAt(off, "memory access with a memory index (multi-memory)")
	}
	_, err = r.u32()
	return err
}

// skipMisc reads a 0xFC instruction: saturating truncations (0-7), bulk
// memory (8-11) and table operations (12-17).
func skipMisc(r *reader, off int) (bulk bool, err error) {
	sub, err := r.u32()
	if err != nil {
		return false, err
	}
	switch sub {
	case 0, 1, 2, 3, 4, 5, 6, 7: // trunc_sat
	case 8: // memory.init dataidx 0x00
		if _, err = r.u32(); err == nil {
			err = r.expectZero("memory.init")
		}
		bulk = true
	case 9: // data.drop dataidx
		_, err = r.u32()
	case 10: // memory.copy 0x00 0x00
		if err = r.expectZero("memory.copy"); err == nil {
			err = r.expectZero("memory.copy")
		}
		bulk = true
	case 11: // memory.fill 0x00
		err = r.expectZero("memory.fill")
		bulk = true
	case 12, 14: // table.init elemidx tableidx, table.copy dst src
		if _, err = r.u32(); err == nil {
			_, err = r.u32()
		}
		bulk = true
	case 13, 16: // elem.drop elemidx, table.size tableidx
		_, err = r.u32()
	case 15, 17: // table.grow tableidx, table.fill tableidx
		_, err = r.u32()
		bulk = true
	default:
		return false, unsupportedOpcode(off, fmt.Sprintf("0xfc %d", sub), "")
	}
	return bulk, err
}

// simdInvalid marks the opcodes below 0x100 that the SIMD proposal leaves
// unassigned; everything at or above 0x100 is relaxed SIMD, not 2.0.
var simdInvalid = func() (t [256]bool) {
	for _, op := range []byte{0x9a, 0xa2, 0xa5, 0xa6, 0xaf, 0xb0, 0xb2, 0xb3, 0xb4, 0xbb,
		0xc2, 0xc5, 0xc6, 0xcf, 0xd0, 0xd2, 0xd3, 0xd4, 0xe2, 0xee} {
		t[op] = true
	}
	return t
}()

// skipSIMD reads a 0xFD instruction's immediates. The sub-opcode must be
// minimally encoded: wazero reads it as a single byte (the 0x01 that ends
// the encoding of 0x80..0xff then decodes as a nop), so a padded encoding
// such as 0x86 0x00 would make it see different instructions than we do —
// and the charges would no longer sit where we think.
func skipSIMD(r *reader, off int) error {
	start := r.pos
	sub, err := r.u32()
	if err != nil {
		return err
	}
	if n := r.pos - start; n != len(appendU32(nil, sub)) {
		return fmt.Errorf("fuel: %w at offset %d: SIMD opcode 0x%x padded to %d bytes, which wazero misreads; re-encode the module (%w)",
			ErrUnsupported, off, sub, n, errAmbiguous)
	}
	if sub > 0xff {
		// Not an opcode of 2.0 either way; for wazero it is a different one.
		return fmt.Errorf("%w (%w)", unsupportedOpcode(off, fmt.Sprintf("0xfd 0x%x", sub), " (relaxed SIMD or unknown)"), errAmbiguous)
	}
	if simdInvalid[sub] {
		return unsupportedOpcode(off, fmt.Sprintf("0xfd 0x%x", sub), " (not in the 2.0 SIMD set)")
	}
	switch {
	case sub <= 0x0b, sub == 0x5c, sub == 0x5d: // loads, store, load_zero
		return readMemArg(r)
	case sub == 0x0c, sub == 0x0d: // v128.const, i8x16.shuffle
		return r.skip(16)
	case sub >= 0x15 && sub <= 0x22: // extract/replace lane
		return r.skip(1)
	case sub >= 0x54 && sub <= 0x5b: // load/store lane
		if err := readMemArg(r); err != nil {
			return err
		}
		return r.skip(1)
	}
	return nil
}
