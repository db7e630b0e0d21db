package fuel

import (
	"errors"
	"fmt"
)

// errSpecStrict marks encodings the spec forbids but some decoders (wazero's
// signed LEB128 among them) tolerate. Refusing them costs nothing: they
// have the same length either way, so they cannot make us misread.
var errSpecStrict = errors.New("an encoding the spec forbids")

// reader decodes one region of the module. Every read is bounds-checked and
// every error names the absolute module offset, so a refusal points at the
// offending byte.
type reader struct {
	buf  []byte
	pos  int
	base int // absolute offset of buf[0] in the module
}

func newReader(buf []byte, base int) *reader {
	return &reader{buf: buf, base: base}
}

// offset is the absolute module offset of the next byte.
func (r *reader) offset() int { return r.base + r.pos }

func (r *reader) remaining() int { return len(r.buf) - r.pos }

func (r *reader) malformed(format string, args ...any) error {
	return malformedAt(r.offset(), format, args...)
}

func malformedAt(off int, format string, args ...any) error {
	return fmt.Errorf("fuel: %w at offset %d: %s", ErrMalformed, off, fmt.Sprintf(format, args...))
}

func unsupportedAt(off int, format string, args ...any) error {
	return fmt.Errorf("fuel: %w at offset %d: %s; only WebAssembly 2.0 modules can be metered (rebuild without that feature)",
		ErrUnsupported, off, fmt.Sprintf(format, args...))
}

// errLaterTypes marks value, reference and block types from proposals
// after 2.0 (typed function references, GC). wazero's validator lets some
// of them through even with only 2.0 enabled; we refuse them all.
var errLaterTypes = errors.New("a type from a later proposal")

func laterTypes(err error) error { return fmt.Errorf("%w (%w)", err, errLaterTypes) }

// unsupportedOpcode reports an opcode outside WebAssembly 2.0; hint names
// the proposal it belongs to, when known.
func unsupportedOpcode(off int, opcode, hint string) error {
	return fmt.Errorf("fuel: unsupported opcode %s at offset %d%s (%w; only WebAssembly 2.0 modules can be metered: rebuild without that feature)",
		opcode, off, hint, ErrUnsupported)
}

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.buf) {
		return 0, r.malformed("unexpected end of data")
	}
	b := r.buf[r.pos]
	r.pos++
	return b, nil
}

// bytes returns the next n bytes without copying them.
func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, r.malformed("need %d bytes, only %d left", n, r.remaining())
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

func (r *reader) skip(n int) error {
	_, err := r.bytes(n)
	return err
}

// expectZero reads the single reserved 0x00 byte that stands for memory 0
// in WebAssembly 2.0; anything else is a multi-memory index.
func (r *reader) expectZero(what string) error {
	off := r.offset()
	b, err := r.byte()
	if err != nil {
		return err
	}
	if b != 0 {
		return unsupportedAt(off, "%s with memory index byte 0x%02x (multi-memory)", what, b)
	}
	return nil
}

func (r *reader) u32() (uint32, error) {
	v, err := r.leb(32, false)
	return uint32(v), err
}

func (r *reader) s32() (int32, error) {
	v, err := r.leb(32, true)
	return int32(v), err
}

func (r *reader) s33() (int64, error) {
	v, err := r.leb(33, true)
	return int64(v), err
}

func (r *reader) s64() (int64, error) {
	v, err := r.leb(64, true)
	return int64(v), err
}

// count reads a vector length and refuses one that could not fit in the
// bytes left, given that each element takes at least minSize bytes. This
// keeps callers from allocating for counts the input cannot back.
func (r *reader) count(minSize int, what string) (int, error) {
	off := r.offset()
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n)*uint64(minSize) > uint64(r.remaining()) {
		return 0, malformedAt(off, "%s count %d exceeds the %d bytes left", what, n, r.remaining())
	}
	return int(n), nil
}

// name reads a length-prefixed byte string.
func (r *reader) name() (string, error) {
	n, err := r.count(1, "name length")
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n)
	return string(b), err
}

// leb decodes a strict LEB128 number of the given bit width: at most
// ceil(bits/7) bytes, and the unused bits of the last byte must be zero
// (unsigned) or copies of the sign bit (signed), as the spec requires.
// Signed results are sign-extended into the uint64.
func (r *reader) leb(bits uint, signed bool) (uint64, error) {
	start := r.offset()
	maxBytes := int((bits + 6) / 7)
	var result uint64
	var shift uint
	for i := 0; i < maxBytes; i++ {
		b, err := r.byte()
		if err != nil {
			return 0, err
		}
		payload := uint64(b & 0x7f)
		if i == maxBytes-1 {
			if b&0x80 != 0 {
				return 0, malformedAt(start, "LEB128 number longer than %d bytes", maxBytes)
			}
			used := bits - shift // payload bits that belong to the value
			if used < 7 {
				extra := payload >> used // bits past the value's width
				if signed {
					// The sign bit and every bit above it must agree.
					sign := (payload >> (used - 1)) & 1
					want := uint64(0)
					if sign == 1 {
						want = (1 << (7 - used)) - 1
					}
					if extra != want {
						return 0, fmt.Errorf("%w (%w)", malformedAt(start, "LEB128 %d-bit signed number out of range", bits), errSpecStrict)
					}
				} else if extra != 0 {
					return 0, fmt.Errorf("%w (%w)", malformedAt(start, "LEB128 %d-bit number out of range", bits), errSpecStrict)
				}
			}
		}
		result |= payload << shift
		shift += 7
		if b&0x80 == 0 {
			if signed && shift < 64 && b&0x40 != 0 {
				result |= ^uint64(0) << shift
			}
			return result, nil
		}
	}
	return 0, malformedAt(start, "LEB128 number longer than %d bytes", maxBytes)
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
