package wasm

import (
	"errors"
	"io"
	"sync"
)

// errOutputFull is what a guest's write gets once its stream is full; WASI
// reports it to the guest as EIO.
var errOutputFull = errors.New("output limit reached")

// boundedBuffer captures one guest stream up to max bytes. The first write
// that does not fit is cut at the bound and calls onFull once, which stops
// the guest: a job that produces more output than allowed fails with
// output_limit rather than being silently truncated.
type boundedBuffer struct {
	max    int
	onFull func()
	tee    io.Writer // gets each accepted byte too (a runtime.Tap); may be nil

	mu   sync.Mutex
	buf  []byte
	full bool
}

func newBoundedBuffer(max int, onFull func()) *boundedBuffer {
	return &boundedBuffer{max: max, onFull: onFull}
}

// Write implements io.Writer.
func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.full {
		b.mu.Unlock()
		return 0, errOutputFull
	}
	room := b.max - len(b.buf)
	if len(p) <= room {
		b.buf = append(b.buf, p...)
		b.mu.Unlock()
		if b.tee != nil {
			b.tee.Write(p)
		}
		return len(p), nil
	}
	b.buf = append(b.buf, p[:room]...)
	b.full = true
	b.mu.Unlock()
	if b.tee != nil {
		b.tee.Write(p[:room])
	}
	b.onFull()
	return room, errOutputFull
}

// result returns what was captured and whether the bound was exceeded.
func (b *boundedBuffer) result() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf, b.full
}
