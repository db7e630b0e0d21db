package wasm

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// writeIn writes text to mw in random pieces of 1 to 9 bytes, calling
// before(pos) ahead of each piece.
func writeIn(r *rand.Rand, mw *maskingWriter, text string, before func(pos int)) {
	for pos := 0; pos < len(text); {
		n := 1 + r.IntN(min(len(text)-pos, 9))
		if before != nil {
			before(pos)
		}
		mw.Write([]byte(text[pos : pos+n]))
		pos += n
	}
	mw.flush()
}

// The masking writer's stream has each value masked however the stream is
// cut into writes (a value split over writes, overlapping values), and the
// record is the stream byte for byte: a reader following the live stream
// by offset then reading the record finds the same bytes.
func TestMaskingWriterMasksAcrossWrites(t *testing.T) {
	const text = "a tok=SECRET-ONE and SECRET-ONE again; short abcd; wxyz12345678 other=PW-222222 end SECRET-"
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		m := &secretMask{}
		m.add([]byte("SECRET-ONE\n")) // stored with a newline, printed without
		m.add([]byte("abcd"))         // too short to mask
		m.add([]byte("wxyz1234"))     // overlaps the next one in the text
		m.add([]byte("yz12345678"))
		var stream bytes.Buffer
		mw := &maskingWriter{w: &stream, mask: m}
		added := false
		writeIn(r, mw, text, func(pos int) {
			if !added && pos >= strings.Index(text, "other") {
				m.add([]byte("PW-222222")) // read before it is printed
				added = true
			}
		})
		got := stream.String()
		for _, v := range []string{"SECRET-ONE", "wxyz1234", "yz12345678", "PW-222222"} {
			if strings.Contains(got, v) {
				t.Fatalf("trial %d: %q went through: %q", trial, v, got)
			}
		}
		if !strings.Contains(got, "short abcd;") || !strings.HasSuffix(got, "end SECRET-") {
			t.Fatalf("trial %d: masked what is no value: %q", trial, got)
		}
		if rec := mw.record([]byte(text)); string(rec) != got {
			t.Fatalf("trial %d: record %q differs from the stream %q", trial, rec, got)
		}
	}
}

// A value printed before the guest read it was passed on as it was: the
// record keeps it so too (re-masking the record at the end made it
// shorter than the stream a follower had read by offset).
func TestMaskingWriterRecordMatchesTheStream(t *testing.T) {
	m := &secretMask{}
	var stream bytes.Buffer
	mw := &maskingWriter{w: &stream, mask: m}
	raw := []byte("port 54321000 open\nthen 54321000 again\n")
	mw.Write(raw[:19])
	m.add([]byte("54321000")) // read only now
	mw.Write(raw[19:])
	mw.flush()
	want := "port 54321000 open\nthen *** again\n"
	if stream.String() != want || string(mw.record(raw)) != want {
		t.Fatalf("stream %q, record %q; want both %q", stream.String(), mw.record(raw), want)
	}
	// Without values the writer passes writes straight on and the record
	// is the raw output.
	var plain bytes.Buffer
	pw := &maskingWriter{w: &plain, mask: &secretMask{}}
	pw.Write([]byte("hello"))
	pw.flush()
	if plain.String() != "hello" || string(pw.record([]byte("hello"))) != "hello" {
		t.Fatalf("no values: %q", plain.String())
	}
}
