package wasm

import (
	"bytes"
	"io"
	"slices"
	"sync"
)

// Secret masking. A value a job read with secret_get is replaced by
// maskText wherever it appears in the job's stdout and stderr, as CI
// systems mask their secrets in logs: a job that prints a token by
// mistake (or a library that logs a request with its header) does not
// leave it in the job record, the raft log, snapshots and every reader's
// terminal. It is a safety net, not a boundary: a guest that means to
// leak a value can encode it first.

// maskText stands for a masked secret value.
const maskText = "***"

// minMaskLen is the shortest value masked: shorter ones would mask
// ordinary text ("1", "yes").
const minMaskLen = 4

// secretMask holds the values a run read, longest first.
type secretMask struct {
	mu   sync.Mutex
	vals [][]byte
}

// add records a value the guest read, and its form without surrounding
// white space (a value stored with its newline is printed without it).
func (m *secretMask) add(v []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, x := range [][]byte{v, bytes.TrimSpace(v)} {
		if len(x) < minMaskLen || slices.ContainsFunc(m.vals, func(y []byte) bool { return bytes.Equal(x, y) }) {
			continue
		}
		m.vals = append(m.vals, bytes.Clone(x))
	}
	slices.SortFunc(m.vals, func(a, b []byte) int { return len(b) - len(a) })
}

// snapshot returns the values and the longest one's length.
func (m *secretMask) snapshot() ([][]byte, int) {
	if m == nil {
		return nil, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.vals) == 0 {
		return nil, 0
	}
	return m.vals, len(m.vals[0])
}

// apply returns b with every value replaced (b itself when none occurs).
func (m *secretMask) apply(b []byte) []byte {
	vals, _ := m.snapshot()
	for _, v := range vals {
		if bytes.Contains(b, v) {
			b = bytes.ReplaceAll(b, v, []byte(maskText))
		}
	}
	return b
}

// maskingWriter passes a stream on with the values masked. It holds back
// the last bytes that could begin a value continuing in the next write
// (at most the longest value's length minus one) until more comes or
// flush; without values it passes writes straight on.
type maskingWriter struct {
	w    io.Writer
	mask *secretMask

	mu      sync.Mutex
	pending []byte
}

func (mw *maskingWriter) Write(p []byte) (int, error) {
	vals, longest := mw.mask.snapshot()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if longest == 0 && len(mw.pending) == 0 {
		return mw.w.Write(p)
	}
	mw.pending = append(mw.pending, p...)
	cut := max(0, len(mw.pending)-(longest-1))
	// An occurrence that starts before the cut is whole here: emit it
	// (masked) rather than split it.
	for _, v := range vals {
		for i := 0; ; {
			j := bytes.Index(mw.pending[i:], v)
			if j < 0 {
				break
			}
			start, end := i+j, i+j+len(v)
			if start < cut && end > cut {
				cut = end
			}
			i = end
		}
	}
	if cut > 0 {
		out := mw.mask.apply(bytes.Clone(mw.pending[:cut]))
		mw.pending = append(mw.pending[:0], mw.pending[cut:]...)
		if _, err := mw.w.Write(out); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// flush passes on what is held back, masked.
func (mw *maskingWriter) flush() {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if len(mw.pending) > 0 {
		mw.w.Write(mw.mask.apply(mw.pending))
		mw.pending = nil
	}
}
