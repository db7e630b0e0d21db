package pairing

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode"

	"github.com/palyra-mesh/palyra/identity"
)

// A code is written "P1-" and then 25 Crockford base32 characters in five
// groups of five. The 125 bits are, most significant first:
//
//	kind (1: 0 node, 1 device) | ID (24) | secret (64) | pin (26) | CRC-10 (10)
//
// The first group is kind and ID: the public ID shown by 'pair list'.
const (
	// Prefix starts every code of this version.
	Prefix       = "P1"
	alphabet     = "0123456789ABCDEFGHJKMNPQRSTVWXYZ" // Crockford: no I, L, O, U
	payloadChars = 25
	groupLen     = 5
	dataBits     = 1 + IDBits + 8*SecretLen + PinBits
	crcBits      = 10
	// crcPoly is CRC-10/ATM, x^10+x^9+x^5+x^4+x+1 (the x^10 term implied).
	// With its non-zero constant term it detects every error burst of up to
	// 10 bits, so every single mistyped character (5 bits) and every swap of
	// two neighbours is caught, not just most of them.
	crcPoly = 0x233
	crcInit = 0x3ff
)

// Keep the layout honest: the bits must fill the characters exactly.
var _ [payloadChars*5 - dataBits - crcBits]struct{}
var _ [dataBits + crcBits - payloadChars*5]struct{}

// String returns the code as the user types it, e.g.
// "P1-0K3QX-9DWAT-M2E7H-RCV4B-Z81NF". It contains the secret.
func (c Code) String() string {
	sym := c.symbols()
	var b strings.Builder
	b.WriteString(Prefix)
	for i, v := range sym {
		if i%groupLen == 0 {
			b.WriteByte('-')
		}
		b.WriteByte(alphabet[v])
	}
	return b.String()
}

// IDString returns the code's public ID, its first group (e.g. "0K3QX"),
// which names its record and is safe to show and log.
func (c Code) IDString() string {
	sym := c.symbols()
	out := make([]byte, groupLen)
	for i := range out {
		out[i] = alphabet[sym[i]]
	}
	return string(out)
}

// symbols packs the code into 25 five-bit values, checksum included.
func (c Code) symbols() [payloadChars]byte {
	var w bitWriter
	kindBit := uint64(0)
	if c.kind == identity.KindDevice {
		kindBit = 1
	}
	w.put(kindBit, 1)
	w.put(uint64(c.id), IDBits)
	w.put(binary.BigEndian.Uint64(c.secret[:]), 8*SecretLen)
	w.put(uint64(c.pin), PinBits)
	w.put(crc10(w.bits), crcBits)
	var sym [payloadChars]byte
	r := bitReader{bits: w.bits}
	for i := range sym {
		sym[i] = byte(r.get(5))
	}
	return sym
}

// Parse reads a code as typed by a person: case does not matter, spaces and
// dashes may be anywhere, and I or L read as 1 and O as 0. Errors wrap
// ErrUnknownVersion, ErrBadCharacter, ErrBadLength or ErrBadChecksum and
// say what to fix.
func Parse(s string) (Code, error) {
	var (
		sym [payloadChars]byte
		n   int // characters read, prefix included
		pos int // 1-based position in s, in characters
	)
	for _, r := range s {
		pos++
		if unicode.IsSpace(r) || unicode.Is(unicode.Pd, r) {
			continue
		}
		n++
		switch {
		case n == 1:
			if r != 'P' && r != 'p' {
				return Code{}, fmt.Errorf("%w: a pairing code starts with %q, not %q (position %d); copy the whole code 'palyra pair create' printed",
					ErrUnknownVersion, Prefix+"-", r, pos)
			}
			continue
		case n == 2:
			if v, ok := symbolValue(r); !ok || alphabet[v] != Prefix[1] {
				return Code{}, fmt.Errorf("%w %q: this palyra reads %s codes; make the code and join with the same palyra release",
					ErrUnknownVersion, "P"+string(r), Prefix)
			}
			continue
		}
		v, ok := symbolValue(r)
		if !ok {
			return Code{}, fmt.Errorf("%w: %q at position %d; codes use only digits and the letters A-Z except U", ErrBadCharacter, r, pos)
		}
		if i := n - len(Prefix) - 1; i < payloadChars {
			sym[i] = v
		}
	}
	if n == 0 {
		return Code{}, fmt.Errorf("%w: the pairing code is empty; pass the code 'palyra pair create' printed", ErrBadLength)
	}
	if got := n - len(Prefix); got != payloadChars {
		got = max(got, 0)
		return Code{}, fmt.Errorf("%w: %d characters after %q, want %d; check for missing or extra characters",
			ErrBadLength, got, Prefix+"-", payloadChars)
	}
	return decode(sym)
}

// decode unpacks 25 five-bit values and checks the checksum.
func decode(sym [payloadChars]byte) (Code, error) {
	var w bitWriter
	for _, v := range sym {
		w.put(uint64(v), 5)
	}
	r := bitReader{bits: w.bits}
	var c Code
	c.kind = identity.KindNode
	if r.get(1) == 1 {
		c.kind = identity.KindDevice
	}
	c.id = uint32(r.get(IDBits))
	binary.BigEndian.PutUint64(c.secret[:], r.get(8*SecretLen))
	c.pin = uint32(r.get(PinBits))
	if crc10(w.bits[:dataBits]) != r.get(crcBits) {
		return Code{}, ErrBadChecksum
	}
	return c, nil
}

// symbolValue maps a typed character to its base32 value, reading Crockford's
// look-alikes (I, L → 1; O → 0) and either case.
func symbolValue(r rune) (byte, bool) {
	switch r {
	case 'I', 'i', 'L', 'l':
		r = '1'
	case 'O', 'o':
		r = '0'
	}
	if r >= 'a' && r <= 'z' {
		r -= 'a' - 'A'
	}
	if r > unicode.MaxASCII {
		return 0, false
	}
	i := strings.IndexByte(alphabet, byte(r))
	return byte(i), i >= 0
}

// crc10 is the CRC of a bit string (one bit per byte), most significant first.
func crc10(bits []byte) uint64 {
	reg := uint16(crcInit)
	for _, b := range bits {
		top := (reg >> (crcBits - 1)) & 1
		reg = (reg << 1) & (1<<crcBits - 1)
		if top^uint16(b) == 1 {
			reg ^= crcPoly
		}
	}
	return uint64(reg)
}

// bitWriter appends bits, one per byte; clarity over speed.
type bitWriter struct{ bits []byte }

func (w *bitWriter) put(v uint64, n int) {
	for i := n - 1; i >= 0; i-- {
		w.bits = append(w.bits, byte(v>>i)&1)
	}
}

// bitReader reads what a bitWriter wrote.
type bitReader struct {
	bits []byte
	at   int
}

func (r *bitReader) get(n int) uint64 {
	var v uint64
	for range n {
		v = v<<1 | uint64(r.bits[r.at])
		r.at++
	}
	return v
}
