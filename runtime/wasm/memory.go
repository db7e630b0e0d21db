package wasm

import (
	"math/bits"
	"sync"
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

	// spent holds the buffers the run is done with (freed, or replaced by
	// a larger one), returned to the pools by recycle once the guest is
	// certainly not running: wazero may free a memory from another
	// goroutine (closing on a timeout) while guest code still unwinds.
	mu       sync.Mutex
	spent    [][]byte
	recycled bool
}

// spend records a buffer the run no longer uses.
func (a *limitedAllocator) spend(b []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.recycled { // after recycle, the GC takes it
		a.spent = append(a.spent, b)
	}
}

// recycle returns the run's spent buffers to the pools. Call it once the
// guest's call has returned (nothing runs guest code any more).
func (a *limitedAllocator) recycle() {
	a.mu.Lock()
	spent := a.spent
	a.spent, a.recycled = nil, true
	a.mu.Unlock()
	for _, b := range spent {
		putBuf(b)
	}
}

var _ experimental.MemoryAllocator = (*limitedAllocator)(nil)

func newLimitedAllocator(limit uint64) *limitedAllocator {
	return &limitedAllocator{limit: limit - limit%pageSize}
}

// Allocate implements experimental.MemoryAllocator. capacity is wazero's
// suggested initial capacity, max the module's declared maximum.
func (a *limitedAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	ceiling := min(a.limit, max)
	return &limitedMemory{alloc: a, ceiling: ceiling, buf: getBuf(min(capacity, ceiling))}
}

// Linear memories are recycled: a trivial job's run otherwise allocates a
// fresh memory (64 KiB and up) that the GC must then find and free, which
// was half of a busy worker's allocation. A buffer goes back to a pool of
// its power-of-two capacity class once its run has ended, zeroed over every
// byte the guest could reach ([0, len)); bytes past len are zero already
// (never handed out), so a reused buffer is all zeros, as a fresh one is:
// no run sees another's memory. sync.Pool drops idle buffers at GC.
const (
	minPoolClass = 16 // 64 KiB
	maxPoolClass = 26 // 64 MiB; larger memories are not pooled
)

var bufPools [maxPoolClass + 1]sync.Pool

// poolClass is the smallest class whose size holds n bytes, or -1.
func poolClass(n uint64) int {
	c := max(bits.Len64(n-1), minPoolClass)
	if n == 0 {
		c = minPoolClass
	}
	if c > maxPoolClass {
		return -1
	}
	return c
}

// getBuf returns a zeroed buffer of length 0 and capacity at least n.
func getBuf(n uint64) []byte {
	c := poolClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if b, ok := bufPools[c].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 1<<c)
}

// putBuf zeroes what b exposed and returns it to its pool.
func putBuf(b []byte) {
	c := poolClass(uint64(cap(b)))
	if c < 0 || cap(b) != 1<<c {
		return
	}
	clear(b)
	b = b[:0]
	bufPools[c].Put(&b)
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
	grown := getBuf(capacity)[:size]
	copy(grown, m.buf)
	m.alloc.spend(m.buf)
	m.buf = grown
	return m.buf
}

// Free implements experimental.LinearMemory: wazero calls it when the
// module instance is closed.
func (m *limitedMemory) Free() {
	if m.buf != nil {
		m.alloc.spend(m.buf)
	}
	m.buf = nil
}

// refusedSize reports the largest refused request in bytes, or 0.
func (a *limitedAllocator) refusedSize() uint64 { return a.refused.Load() }
