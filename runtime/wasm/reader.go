package wasm

import (
	"errors"
	"fmt"
)

var errTruncated = errors.New("unexpected end of module")

// reader is a bounds-checked cursor over wasm bytes. Every read fails
// cleanly at the end of its slice; nothing here can panic or allocate in
// proportion to a number read from the input.
type reader struct {
	b   []byte
	off int
}

func (r *reader) done() bool { return r.off >= len(r.b) }

// left is the number of unread bytes.
func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, errTruncated
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

// sub reads a length-prefixed region and returns a reader over it.
func (r *reader) sub() (reader, error) {
	n, err := r.u32()
	if err != nil {
		return reader{}, err
	}
	b, err := r.bytes(int(n))
	return reader{b: b}, err
}

// u32 reads an unsigned LEB128 value of at most 5 bytes.
func (r *reader) u32() (uint32, error) {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c > 0x0f {
			return 0, errors.New("integer too large")
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errors.New("integer too long")
}

// skipLEB skips a signed or unsigned LEB128 value of at most maxBytes bytes.
func (r *reader) skipLEB(maxBytes int) error {
	for range maxBytes {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
	}
	return errors.New("integer too long")
}

// count reads a vector length and refuses one larger than limit, or larger
// than the bytes left (every item takes at least minSize bytes): a decoder
// that sizes a slice from it must not be able to ask for gigabytes.
func (r *reader) count(what string, limit, minSize int) (int, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if int64(n) > int64(limit) {
		return 0, &limitError{what: what, n: int64(n), limit: int64(limit)}
	}
	if int64(n)*int64(minSize) > int64(r.left()) {
		return 0, fmt.Errorf("%d %s declared, but only %d bytes follow", n, what, r.left())
	}
	return int(n), nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	s, err := r.bytes(int(n))
	return string(s), err
}

// limitError reports a module beyond one of the executor's implementation
// limits (as opposed to a malformed one).
type limitError struct {
	what     string
	n, limit int64
}

func (e *limitError) Error() string {
	return fmt.Sprintf("%d %s, more than the limit of %d", e.n, e.what, e.limit)
}
