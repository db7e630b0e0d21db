package wasm

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// pageSize is the WebAssembly page size in bytes.
const pageSize = 65536

// limitedAllocator backs one run's linear memory and refuses to grow it past
// limit. wazero then makes memory.grow return -1 to the guest, as the spec
// allows; the allocator remembers the refusal so the executor can tell the
// user the memory limit, and not some guest-side symptom, ended the run.
//
// It is installed per run with experimental.WithMemoryAllocator, so one
// runtime and one compiled module serve runs with different limits.
type limitedAllocator struct {
	limit uint64
	// refused is the largest size (bytes) the guest asked for beyond limit;
	// 0 when it never did. Written by the guest's goroutine, read after.
	refused atomic.Uint64
}

var _ experimental.MemoryAllocator = (*limitedAllocator)(nil)

func newLimitedAllocator(limit uint64) *limitedAllocator {
	return &limitedAllocator{limit: limit - limit%pageSize}
}

// Allocate implements experimental.MemoryAllocator. capacity is wazero's
// suggested initial capacity, max the module's declared maximum.
func (a *limitedAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	ceiling := min(a.limit, max)
	return &limitedMemory{alloc: a, ceiling: ceiling, buf: make([]byte, 0, min(capacity, ceiling))}
}

// limitedMemory is one linear memory. It grows by doubling (bounded by the
// limit) so a guest growing page by page does not copy on every page.
type limitedMemory struct {
	alloc   *limitedAllocator
	ceiling uint64
	buf     []byte
}

// Reallocate implements experimental.LinearMemory. Returning nil refuses.
func (m *limitedMemory) Reallocate(size uint64) []byte {
	if size > m.alloc.limit {
		for {
			old := m.alloc.refused.Load()
			if size <= old || m.alloc.refused.CompareAndSwap(old, size) {
				break
			}
		}
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		// The bytes past len were never handed out, so they are still zero.
		m.buf = m.buf[:size]
		return m.buf
	}
	capacity := max(size, min(2*uint64(cap(m.buf)), m.ceiling))
	grown := make([]byte, size, capacity)
	copy(grown, m.buf)
	m.buf = grown
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *limitedMemory) Free() { m.buf = nil }

// refusedSize reports the largest refused request in bytes, or 0.
func (a *limitedAllocator) refusedSize() uint64 { return a.refused.Load() }
