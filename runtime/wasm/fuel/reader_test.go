package fuel

import (
	"errors"
	"math"
	"testing"
)

func TestLEBRoundTrip(t *testing.T) {
	for _, v := range []uint32{0, 1, 63, 64, 127, 128, 16383, 16384, 1 << 28, math.MaxUint32} {
		r := newReader(appendU32(nil, v), 0)
		got, err := r.u32()
		if err != nil || got != v || r.remaining() != 0 {
			t.Errorf("u32 %d: got %d, %v, %d left", v, got, err, r.remaining())
		}
	}
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, 1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64} {
		r := newReader(appendS64(nil, v), 0)
		got, err := r.s64()
		if err != nil || got != v || r.remaining() != 0 {
			t.Errorf("s64 %d: got %d, %v, %d left", v, got, err, r.remaining())
		}
	}
	for _, v := range []int32{0, -1, 1, math.MaxInt32, math.MinInt32} {
		r := newReader(appendS64(nil, int64(v)), 0)
		got, err := r.s32()
		if err != nil || got != v {
			t.Errorf("s32 %d: got %d, %v", v, got, err)
		}
	}
}

func TestLEBStrict(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		read func(*reader) error
	}{
		{"u32 six bytes", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, func(r *reader) error { _, err := r.u32(); return err }},
		{"u32 over 32 bits", []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, func(r *reader) error { _, err := r.u32(); return err }},
		{"u32 truncated", []byte{0x80, 0x80}, func(r *reader) error { _, err := r.u32(); return err }},
		{"s32 bad sign bits", []byte{0xff, 0xff, 0xff, 0xff, 0x4f}, func(r *reader) error { _, err := r.s32(); return err }},
		{"s33 bad sign bits", []byte{0x80, 0x80, 0x80, 0x80, 0x20}, func(r *reader) error { _, err := r.s33(); return err }},
		{"s64 eleven bytes", append(make([]byte, 0, 11), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00), func(r *reader) error { _, err := r.s64(); return err }},
		{"s64 bad last byte", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02}, func(r *reader) error { _, err := r.s64(); return err }},
		{"count over remaining", []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x00}, func(r *reader) error { _, err := r.count(1, "x"); return err }},
	}
	for _, c := range cases {
		err := c.read(newReader(c.in, 100))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", c.name, err)
		}
	}
	// The widest valid encodings are accepted.
	if v, err := newReader([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 0).u32(); err != nil || v != math.MaxUint32 {
		t.Errorf("max u32: %d, %v", v, err)
	}
	if v, err := newReader([]byte{0x80, 0x80, 0x80, 0x80, 0x78}, 0).s32(); err != nil || v != math.MinInt32 {
		t.Errorf("min s32: %d, %v", v, err)
	}
	if v, err := newReader([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 0).s33(); err != nil || v != math.MaxUint32 {
		t.Errorf("max s33: %d, %v", v, err)
	}
}
