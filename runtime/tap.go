package runtime

import (
	"context"
	"io"
	"sync"
	"time"
)

// Stream names one of a run's output streams.
type Stream int

// The output streams a Tap follows.
const (
	Stdout Stream = 0
	Stderr Stream = 1
)

// TapKeep is how many of each stream's latest bytes a Tap keeps for
// followers; older bytes are dropped (the run's own output, bounded by
// Spec.MaxOutput, is unaffected).
const TapKeep = 1 << 20

// Tap lets others follow a run's output while it is written: the executor
// writes each accepted byte of stdout and stderr to it, and any number of
// readers read from byte offsets, waiting for more. It keeps only the last
// TapKeep bytes of each stream, so a slow reader may find that bytes were
// skipped. The final output in the run's Result stays authoritative.
type Tap struct {
	mu      sync.Mutex
	streams [2]tapStream
	done    bool
	started time.Time // when the run got its slot (Start); zero while it waits for one
	// withdrawn: the run was taken back before it got its slot (Withdraw);
	// Start then refuses it.
	withdrawn bool
	changed   chan struct{} // closed and replaced on every write and on Close
}

// Start records that the run has its slot and runs now (executors call it
// once, when the run begins; a worker can then tell a run that waits for
// a slot from one that runs). It returns false, and records nothing, when
// the run was withdrawn while it waited: the executor must then not run
// it (it ends canceled).
func (t *Tap) Start() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.withdrawn {
		return false
	}
	if t.started.IsZero() {
		t.started = time.Now()
	}
	return true
}

// Withdraw takes back a run that has not got its slot yet: it returns
// true, and the run's Start will refuse it, unless the run has already
// started (false: it runs on). A worker hands such runs back to the
// cluster when its node stops taking work.
func (t *Tap) Withdraw() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started.IsZero() {
		return false
	}
	t.withdrawn = true
	return true
}

// Done reports whether the run has ended (Close).
func (t *Tap) Done() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// Withdrawn reports whether the run was withdrawn (Withdraw).
func (t *Tap) Withdrawn() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.withdrawn
}

// Started is when the run got its slot; zero while it waits for one.
func (t *Tap) Started() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.started
}

type tapStream struct {
	buf   []byte
	start int64 // the stream offset of buf[0]
}

// NewTap returns an empty, open Tap.
func NewTap() *Tap { return &Tap{changed: make(chan struct{})} }

// Writer returns the writer for stream s.
func (t *Tap) Writer(s Stream) io.Writer { return tapWriter{t, s} }

type tapWriter struct {
	t *Tap
	s Stream
}

func (w tapWriter) Write(p []byte) (int, error) {
	w.t.append(w.s, p)
	return len(p), nil
}

func (t *Tap) append(s Stream, p []byte) {
	if len(p) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := &t.streams[s]
	st.buf = append(st.buf, p...)
	if over := len(st.buf) - TapKeep; over > 0 {
		// Drop the oldest bytes; copy down so the backing array stays
		// bounded too.
		n := copy(st.buf, st.buf[over:])
		st.buf = st.buf[:n]
		st.start += int64(over)
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// Close marks the run ended: readers waiting for more return.
func (t *Tap) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done {
		t.done = true
		close(t.changed)
		t.changed = make(chan struct{})
	}
}

// Chunk is what a Tap read returns for one stream.
type Chunk struct {
	Offset  int64  // stream offset of Data[0]
	Data    []byte // at most the max asked for
	Skipped int64  // bytes between the asked offset and Offset that are gone
}

// Read returns each stream's bytes from the offsets given, up to limit bytes
// per stream, and whether the run has ended. It does not wait.
func (t *Tap) Read(from [2]int64, limit int) (out [2]Chunk, done bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for s := range t.streams {
		st := &t.streams[s]
		off := max(from[s], st.start)
		end := st.start + int64(len(st.buf))
		if off > end {
			off = end
		}
		data := st.buf[off-st.start:]
		if len(data) > limit {
			data = data[:limit]
		}
		out[s] = Chunk{Offset: off, Data: append([]byte(nil), data...), Skipped: off - min(from[s], off)}
	}
	return out, t.done
}

// Wait blocks until either stream has bytes past from, the run ends, or
// ctx is done.
func (t *Tap) Wait(ctx context.Context, from [2]int64) {
	for {
		t.mu.Lock()
		ready := t.done
		for s := range t.streams {
			if t.streams[s].start+int64(len(t.streams[s].buf)) > from[s] {
				ready = true
			}
		}
		ch := t.changed
		t.mu.Unlock()
		if ready {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}
