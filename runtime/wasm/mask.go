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
// ordinary text ("true", a port, a PIN) and corrupt structured output.
const minMaskLen = 8

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

// snapshot returns a copy of the values' list and the longest's length.
func (m *secretMask) snapshot() ([][]byte, int) {
	if m == nil {
		return nil, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.vals) == 0 {
		return nil, 0
	}
	return slices.Clone(m.vals), len(m.vals[0])
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

// maskingWriter masks one output stream as it is written, and what it
// passes on is the job's record of that stream too (record), so a reader
// who followed the live stream (job logs -f, by offset) and then reads
// the record finds the same bytes. Until the guest reads a value the
// stream passes through as written; from then on it holds back the last
// bytes that could begin a value continuing in the next write (at most
// the longest value's length minus one) until more come or flush. A value
// printed before the guest read it is not masked: it was passed on then.
type maskingWriter struct {
	w    io.Writer // the live stream (a tap's writer); nil without one
	mask *secretMask

	mu      sync.Mutex
	raw     int  // bytes passed on before any value was known
	masking bool // a value was known at some write: the rest is in emitted
	pending []byte
	emitted []byte
}

func (mw *maskingWriter) Write(p []byte) (int, error) {
	vals, longest := mw.mask.snapshot()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if !mw.masking && longest == 0 {
		mw.raw += len(p)
		mw.pass(p)
		return len(p), nil
	}
	mw.masking = true
	mw.pending = append(mw.pending, p...)
	cut := max(0, len(mw.pending)-(longest-1))
	// An occurrence that starts before the cut is whole here: emit it
	// (masked) rather than split it; moving the cut may split another,
	// so until it stays.
	for moved := true; moved; {
		moved = false
		for _, v := range vals {
			for i := 0; ; {
				j := bytes.Index(mw.pending[i:], v)
				if j < 0 {
					break
				}
				start, end := i+j, i+j+len(v)
				if start < cut && end > cut {
					cut, moved = end, true
				}
				i = start + 1
			}
		}
	}
	if cut > 0 {
		out := mw.mask.apply(bytes.Clone(mw.pending[:cut]))
		mw.pending = append(mw.pending[:0], mw.pending[cut:]...)
		mw.emitted = append(mw.emitted, out...)
		mw.pass(out)
	}
	return len(p), nil
}

func (mw *maskingWriter) pass(b []byte) {
	if mw.w != nil {
		mw.w.Write(b)
	}
}

// flush passes on what is held back, masked.
func (mw *maskingWriter) flush() {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if len(mw.pending) > 0 {
		out := mw.mask.apply(mw.pending)
		mw.emitted = append(mw.emitted, out...)
		mw.pass(out)
		mw.pending = nil
	}
}

// record is the stream as passed on, given raw, what the guest wrote
// (and the stream took): its first bytes as they were, then the masked
// rest. Call after flush.
func (mw *maskingWriter) record(raw []byte) []byte {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if !mw.masking {
		return raw
	}
	return append(slices.Clip(raw[:mw.raw]), mw.emitted...)
}
