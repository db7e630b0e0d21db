package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// sample writes a small but complete file: a state section spanning
// several frames and three blobs (one empty, one spanning frames).
func sample(t testing.TB, state []byte, blobs ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Header(Header{ClusterName: "c1", CAFingerprint: "ab", CreatedAt: time.Unix(1700000000, 0).UTC(),
		RaftIndex: 42, RaftTerm: 3, Servers: []Server{{ID: "n-1", Address: "127.0.0.1:1", Voter: true}}, StateBytes: int64(len(state))}))
	must(w.Keys(Keys{CACertPEM: []byte("cert"), CAKeyPEM: []byte("key"), DataKey: bytes.Repeat([]byte{7}, 32)}))
	if _, err := w.Write(state); err != nil {
		t.Fatal(err)
	}
	must(w.EndState())
	var n int64
	for _, b := range blobs {
		must(w.Blob(hashOf(b), b))
		n += int64(len(b))
	}
	must(w.Close(Summary{Jobs: 5, Blobs: len(blobs), BlobBytes: n}))
	if w.Bytes() != int64(buf.Len()) {
		t.Fatalf("Bytes() = %d, wrote %d", w.Bytes(), buf.Len())
	}
	return buf.Bytes()
}

type collected struct {
	h     Header
	k     Keys
	state []byte
	blobs map[string][]byte
	order []string
}

func collect(c *collected) Visitor {
	c.blobs = map[string][]byte{}
	return Visitor{
		Header: func(h Header) error { c.h = h; return nil },
		Keys:   func(k Keys) error { c.k = k; return nil },
		State: func(r io.Reader) error {
			var err error
			c.state, err = io.ReadAll(r)
			return err
		},
		Blob: func(hash string, size int64, r io.Reader) error {
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			if int64(len(b)) != size {
				return errors.New("size mismatch")
			}
			c.blobs[hash] = b
			c.order = append(c.order, hash)
			return nil
		},
	}
}

func TestRoundTrip(t *testing.T) {
	state := bytes.Repeat([]byte("state!"), 400_000) // > 2 frames
	big := bytes.Repeat([]byte{1, 2, 3}, 700_000)    // > 2 frames
	blobs := [][]byte{[]byte("hello"), {}, big}
	file := sample(t, state, blobs...)
	var c collected
	h, s, err := Read(bytes.NewReader(file), collect(&c))
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != FormatVersion || h.RaftIndex != 42 || h.RaftTerm != 3 || h.ClusterName != "c1" || len(h.Servers) != 1 || c.h.ClusterName != "c1" {
		t.Fatalf("header %+v", h)
	}
	if string(c.k.CAKeyPEM) != "key" || len(c.k.DataKey) != 32 {
		t.Fatalf("keys %+v", c.k)
	}
	if !bytes.Equal(c.state, state) {
		t.Fatalf("state: got %d bytes, want %d", len(c.state), len(state))
	}
	if s.Jobs != 5 || s.Blobs != 3 {
		t.Fatalf("summary %+v", s)
	}
	for i, b := range blobs {
		if c.order[i] != hashOf(b) || !bytes.Equal(c.blobs[hashOf(b)], b) {
			t.Fatalf("blob %d differs", i)
		}
	}
	// Visitors that read nothing still get every check.
	if _, _, err := Read(bytes.NewReader(file), Visitor{}); err != nil {
		t.Fatal(err)
	}
	// Visitors that read part of a section leave the rest to Read.
	part := Visitor{
		State: func(r io.Reader) error { _, err := r.Read(make([]byte, 10)); return err },
		Blob:  func(_ string, _ int64, r io.Reader) error { r.Read(make([]byte, 1)); return nil },
	}
	if _, _, err := Read(bytes.NewReader(file), part); err != nil {
		t.Fatal(err)
	}
}

func isFormatError(err error, truncated bool) bool {
	var fe *FormatError
	return errors.As(err, &fe) && fe.Truncated == truncated && fe.Hint() != ""
}

// Every proper prefix of a file is refused as truncated (or, for the
// first bytes, as not a snapshot); none is accepted.
func TestTruncatedFilesAreRefused(t *testing.T) {
	file := sample(t, []byte("some state bytes"), []byte("blob one"), []byte("blob two"))
	for n := 0; n < len(file); n++ {
		_, _, err := Read(bytes.NewReader(file[:n]), Visitor{})
		if err == nil {
			t.Fatalf("prefix of %d/%d bytes accepted", n, len(file))
		}
		if !isFormatError(err, true) {
			t.Fatalf("prefix of %d bytes: %v, want a truncation error", n, err)
		}
		if !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("prefix of %d bytes: %q does not say truncated", n, err)
		}
	}
}

// Flipping any single byte is caught: by the framing, a blob's hash or
// the trailing checksum.
func TestEveryCorruptByteIsRefused(t *testing.T) {
	file := sample(t, []byte("some state bytes"), []byte("blob one"), []byte("blob two"))
	for i := range file {
		bad := bytes.Clone(file)
		bad[i] ^= 0x40
		var c collected
		_, _, err := Read(bytes.NewReader(bad), collect(&c))
		if err == nil {
			t.Fatalf("flipping byte %d/%d went unnoticed", i, len(file))
		}
		var fe *FormatError
		if !errors.As(err, &fe) && !errors.Is(err, ErrNewerFormat) {
			t.Fatalf("byte %d: %v is not a format error", i, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	file := sample(t, []byte("state"), []byte("blob"))
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":         {nil, "empty"},
		"not snapshot":  {[]byte("PK\x03\x04 a zip file, not ours"), "not a palyra snapshot"},
		"trailing data": {append(bytes.Clone(file), 0), "follows the checksum"},
		"newer format": {func() []byte {
			b := bytes.Clone(file)
			binary.BigEndian.PutUint16(b[len(Magic):], FormatVersion+1)
			return b
		}(), "newer"},
		"huge record": {func() []byte {
			b := bytes.Clone(file[:len(Magic)+2])
			return append(b, frameHeader, 0xff, 0xff, 0xff, 0xff)
		}(), "claims"},
	}
	for name, tc := range cases {
		_, _, err := Read(bytes.NewReader(tc.data), Visitor{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, tc.want)
		}
	}
}

// A blob whose bytes were replaced consistently (same length, frames
// intact) is caught by its hash even before the checksum.
func TestBlobHashIsChecked(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Header(Header{})
	w.Keys(Keys{})
	w.Write([]byte("s"))
	w.EndState()
	w.Blob(hashOf([]byte("good")), []byte("good"))
	w.Close(Summary{})
	b := buf.Bytes()
	i := bytes.Index(b, []byte("good"))
	copy(b[i:], "evil")
	var c collected
	_, _, err := Read(bytes.NewReader(b), collect(&c))
	if err == nil || !strings.Contains(err.Error(), "does not match its sha256") {
		t.Fatalf("got %v", err)
	}
}

func TestWriterRefusesMisuse(t *testing.T) {
	w := NewWriter(io.Discard)
	if err := w.Keys(Keys{}); err == nil {
		t.Fatal("keys before header accepted")
	}
	w = NewWriter(io.Discard)
	w.Header(Header{})
	w.Keys(Keys{})
	w.Write([]byte("x"))
	w.EndState()
	if err := w.Blob(hashOf([]byte("a")), []byte("b")); err == nil {
		t.Fatal("blob under a wrong hash accepted")
	}
}

// A visitor's error ends Read with it.
func TestVisitorErrorStopsRead(t *testing.T) {
	file := sample(t, []byte("state"), []byte("blob"))
	boom := errors.New("disk full")
	_, _, err := Read(bytes.NewReader(file), Visitor{Blob: func(string, int64, io.Reader) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}
