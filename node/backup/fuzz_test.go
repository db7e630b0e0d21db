package backup

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzRead: no input makes Read panic, and whatever it accepts is a file
// the writer could have produced: reading it again gives the same
// sections, and every blob matches its hash.
func FuzzRead(f *testing.F) {
	f.Add(sample(f, []byte("state"), []byte("blob")))
	f.Add(sample(f, bytes.Repeat([]byte("s"), 3000), []byte{}, []byte("x")))
	f.Add(sample(f, []byte("state")))
	f.Add([]byte(Magic + "\x00\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
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
	})
}
