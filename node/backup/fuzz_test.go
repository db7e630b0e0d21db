package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
)

// rechecksum recomputes the trailing checksum of data if it ends with a
// checksum record, so mutations reach the checks behind it (order,
// lengths, JSON, blob hashes) instead of failing at the checksum.
func rechecksum(data []byte) []byte {
	n := len(data) - 5 - sha256.Size
	if n < 0 || data[n] != frameChecksum || binary.BigEndian.Uint32(data[n+1:]) != sha256.Size {
		return data
	}
	out := bytes.Clone(data)
	sum := sha256.Sum256(out[:n])
	copy(out[n+5:], sum[:])
	return out
}

// FuzzRead: no input makes Read panic, and whatever it accepts is a file
// the writer could have produced: reading it again gives the same
// sections, and every blob matches its hash. Each input is read as it is
// and with its trailing checksum made to match.
func FuzzRead(f *testing.F) {
	f.Add(sample(f, []byte("state"), []byte("blob")))
	f.Add(sample(f, bytes.Repeat([]byte("s"), 3000), []byte{}, []byte("x")))
	f.Add(sample(f, []byte("state")))
	f.Add([]byte(Magic + "\x00\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRead(t, data)
		if fixed := rechecksum(data); !bytes.Equal(fixed, data) {
			checkRead(t, fixed)
		}
	})
}

func checkRead(t *testing.T, data []byte) {
	t.Helper()
	var c collected
	v := collect(&c)
	h, s, err := Read(bytes.NewReader(data), v)
	if err != nil {
		var fe *FormatError
		if !errors.As(err, &fe) && !errors.Is(err, ErrNewerFormat) {
			t.Fatalf("error of an unexpected kind: %v", err)
		}
		return
	}
	for hash, b := range c.blobs {
		if hashOf(b) != hash {
			t.Fatalf("accepted blob %s with other bytes", hash)
		}
	}
	// Rewriting what was read and reading it back gives the same.
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Header(h)
	w.Keys(c.k)
	w.Write(c.state)
	w.EndState()
	for _, hash := range c.order {
		w.Blob(hash, c.blobs[hash])
	}
	if err := w.Close(s); err != nil {
		t.Fatalf("rewrite: %v", err)
	}
	var c2 collected
	if _, _, err := Read(bytes.NewReader(buf.Bytes()), collect(&c2)); err != nil {
		t.Fatalf("rewritten file refused: %v", err)
	}
	if !bytes.Equal(c.state, c2.state) || len(c.order) != len(c2.order) {
		t.Fatal("rewritten file differs")
	}
}
