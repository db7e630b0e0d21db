package wasm

import (
	"fmt"
)

// The readers below accept exactly the single-byte encodings of WebAssembly
// 2.0 (wazero's default features). Refusing the longer forms of later
// proposals (typed references, GC) keeps this scanner and wazero's decoder
// reading the same bytes the same way: if they could disagree on where an
// item ends, wazero could read a count from bytes this scanner never
// bounded.

// valtype reads a number, vector or reference type.
func (r *reader) valtype() error {
	t, err := r.byte()
	if err != nil {
		return err
	}
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f: // i32 i64 f32 f64 v128 funcref externref
		return nil
	}
	return fmt.Errorf("unsupported value type 0x%02x", t)
}

// reftype reads funcref or externref.
func (r *reader) reftype() error {
	t, err := r.byte()
	if err != nil {
		return err
	}
	if t != 0x70 && t != 0x6f {
		return fmt.Errorf("unsupported reference type 0x%02x", t)
	}
	return nil
}

// globaltype reads a value type and a mutability flag.
func (r *reader) globaltype() error {
	if err := r.valtype(); err != nil {
		return err
	}
	mut, err := r.byte()
	if err == nil && mut > 1 {
		err = fmt.Errorf("bad mutability flag 0x%02x", mut)
	}
	return err
}

// limits reads table or memory limits: flags bit 0 says a maximum follows
// (bit 1, shared, comes with the threads proposal).
func (r *reader) limits() (min, max uint32, hasMax bool, err error) {
	flags, err := r.byte()
	if err != nil {
		return 0, 0, false, err
	}
	if flags > 0x03 {
		return 0, 0, false, fmt.Errorf("unsupported limits flags 0x%02x", flags)
	}
	if min, err = r.u32(); err != nil {
		return 0, 0, false, err
	}
	if flags&1 != 0 {
		max, err = r.u32()
		hasMax = true
	}
	return min, max, hasMax, err
}

// constExpr reads a constant expression up to and including its end.
func (r *reader) constExpr() error {
	for {
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0b: // end
			return nil
		case 0x41: // i32.const
			err = r.skipLEB(5)
		case 0x42: // i64.const
			err = r.skipLEB(10)
		case 0x43: // f32.const
			_, err = r.bytes(4)
		case 0x44: // f64.const
			_, err = r.bytes(8)
		case 0x23, 0xd2: // global.get, ref.func
			_, err = r.u32()
		case 0xd0: // ref.null
			err = r.reftype()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended-const arithmetic
		case 0xfd: // SIMD prefix: only v128.const is constant
			var sub uint32
			if sub, err = r.u32(); err == nil {
				if sub != 12 {
					return fmt.Errorf("unsupported instruction 0xfd %d in a constant expression", sub)
				}
				_, err = r.bytes(16)
			}
		default:
			return fmt.Errorf("unsupported instruction 0x%02x in a constant expression", op)
		}
		if err != nil {
			return err
		}
	}
}
