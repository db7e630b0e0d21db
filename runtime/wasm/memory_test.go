package wasm

import (
	"bytes"
	"testing"
)

// A recycled linear memory comes back all zeros, however much of it the
// previous run wrote (also after growing), and a buffer is not reused
// before its run has ended (recycle).
func TestRecycledMemoryIsZeroed(t *testing.T) {
	for round := range 50 {
		a := newLimitedAllocator(64 << 20)
		m := a.Allocate(pageSize, 64<<20)
		b := m.Reallocate(pageSize)
		for i := range b {
			b[i] = 0xAB
		}
		b = m.Reallocate(3 * pageSize) // grows into a new buffer; the old one is spent
		if !bytes.Equal(b[:pageSize], bytes.Repeat([]byte{0xAB}, pageSize)) {
			t.Fatalf("round %d: growing lost the memory's contents", round)
		}
		for i := range b {
			b[i] = 0xCD
		}
		m.Free()
		// Freed but not recycled: a new run must not get these buffers.
		other := newLimitedAllocator(64<<20).Allocate(pageSize, 64<<20)
		if c := other.Reallocate(pageSize); bytes.IndexFunc(c, func(r rune) bool { return r != 0 }) >= 0 {
			t.Fatalf("round %d: a buffer was reused before its run ended", round)
		}
		a.recycle()
		for _, size := range []uint64{pageSize, 4 * pageSize} {
			n := newLimitedAllocator(64<<20).Allocate(size, 64<<20)
			c := n.Reallocate(size)
			full := c[:cap(c)]
			if i := bytes.IndexFunc(full, func(r rune) bool { return r != 0 }); i >= 0 {
				t.Fatalf("round %d: a recycled memory of %d bytes holds a non-zero byte at %d", round, cap(c), i)
			}
		}
	}
}
