package wasm

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// The masking writer's output is the stream with each value masked,
// however the stream is cut into writes (a value split over writes
// included), with values known from the start or added mid-stream.
func TestMaskingWriterMasksAcrossWrites(t *testing.T) {
	const text = "a tok=SECRET-ONE and SECRET-ONE again; short abc; other=PW-2222 end SECRET-"
	want := "a tok=*** and *** again; short abc; other=*** end SECRET-"
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		m := &secretMask{}
		m.add([]byte("SECRET-ONE\n")) // stored with a newline, printed without
		m.add([]byte("abc"))          // too short to mask
		var got bytes.Buffer
		mw := &maskingWriter{w: &got, mask: m}
		rest, added := text, false
		for rest != "" {
			n := 1 + r.IntN(min(len(rest), 9))
			if trial%2 == 1 && !added && len(text)-len(rest) >= strings.Index(text, "other") {
				m.add([]byte("PW-2222")) // read before it is printed
				added = true
			}
			mw.Write([]byte(rest[:n]))
			rest = rest[n:]
		}
		if trial%2 == 0 {
			m.add([]byte("PW-2222")) // known only before the end: the held-back tail and the result mask it
		}
		mw.flush()
		if trial%2 == 1 && got.String() != want {
			t.Fatalf("trial %d: %q, want %q", trial, got.String(), want)
		}
		if s := m.apply([]byte(text)); string(s) != want {
			t.Fatalf("apply: %q, want %q", s, want)
		}
		if strings.Contains(got.String(), "SECRET-ONE") {
			t.Fatalf("trial %d: the value went through: %q", trial, got.String())
		}
	}
	// Without values the writer passes writes straight on.
	var plain bytes.Buffer
	mw := &maskingWriter{w: &plain, mask: &secretMask{}}
	mw.Write([]byte("hello"))
	if plain.String() != "hello" {
		t.Fatalf("no values: %q", plain.String())
	}
}
