package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Read reads a snapshot file from src, handing its sections to v, and
// returns its header and summary once every byte has been read and
// checked: frame order and lengths, each blob's hash, the trailing
// checksum, and that nothing follows it. A damaged file yields a
// *FormatError (or an error wrapping ErrNewerFormat); nothing in it can
// make Read panic or allocate more than a frame.
//
// What v received is trustworthy only once Read returned nil: the
// checksum comes last, so a visitor that writes the sections somewhere
// must be ready to discard them.
func Read(src io.Reader, v Visitor) (Header, Summary, error) {
	r := &reader{src: bufio.NewReaderSize(src, 256<<10), sum: sha256.New(), buf: make([]byte, 0, 64<<10)}
	var h Header
	var s Summary
	if err := r.magic(); err != nil {
		return h, s, err
	}
	payload, err := r.expect(frameHeader, "the header")
	if err != nil {
		return h, s, err
	}
	if err := r.decodeJSON(payload, &h, "header"); err != nil {
		return h, s, err
	}
	if v.Header != nil {
		if err := v.Header(h); err != nil {
			return h, s, err
		}
	}
	if payload, err = r.expect(frameKeys, "the keys"); err != nil {
		return h, s, err
	}
	var k Keys
	if err := r.decodeJSON(payload, &k, "keys"); err != nil {
		return h, s, err
	}
	if v.Keys != nil {
		if err := v.Keys(k); err != nil {
			return h, s, err
		}
	}
	if err := r.section(&stateReader{r: r}, func(sr io.Reader) error {
		if v.State == nil {
			return nil
		}
		return v.State(sr)
	}); err != nil {
		return h, s, err
	}
	for {
		typ, payload, err := r.next()
		if err != nil {
			return h, s, err
		}
		if typ == frameEnd {
			if err := r.decodeJSON(payload, &s, "summary"); err != nil {
				return h, s, err
			}
			break
		}
		if typ != frameBlob {
			return h, s, r.corrupt("expected a blob or the summary, found a %s record", frameName(typ))
		}
		if len(payload) != sha256.Size+8 {
			return h, s, r.corrupt("blob record of %d bytes, want %d", len(payload), sha256.Size+8)
		}
		br := &blobReader{r: r, want: bytes.Clone(payload[:sha256.Size]), left: int64(binary.BigEndian.Uint64(payload[sha256.Size:])),
			sum: sha256.New(), hash: hex.EncodeToString(payload[:sha256.Size])}
		if br.left < 0 || br.left > MaxBlobBytes {
			return h, s, r.corrupt("blob %s claims %d bytes", br.hash, uint64(br.left))
		}
		size := br.left
		if err := r.section(br, func(rd io.Reader) error {
			if v.Blob == nil {
				return nil
			}
			return v.Blob(br.hash, size, rd)
		}); err != nil {
			return h, s, err
		}
	}
	want := r.sum.Sum(nil)
	typ, payload, err := r.next()
	if err != nil {
		return h, s, err
	}
	if typ != frameChecksum || len(payload) != sha256.Size {
		return h, s, r.corrupt("expected the checksum, found a %s record of %d bytes", frameName(typ), len(payload))
	}
	if !bytes.Equal(payload, want) {
		return h, s, r.corrupt("checksum mismatch: the file's content does not match the sha256 it was saved with")
	}
	if _, err := r.src.ReadByte(); !errors.Is(err, io.EOF) {
		if err != nil {
			return h, s, fmt.Errorf("read snapshot file: %w", err)
		}
		return h, s, r.corrupt("data follows the checksum")
	}
	return h, s, nil
}

// frameName names a record type in messages.
func frameName(typ byte) string {
	switch typ {
	case frameHeader:
		return "header"
	case frameKeys:
		return "keys"
	case frameState:
		return "state"
	case frameStateEnd:
		return "end-of-state"
	case frameBlob:
		return "blob"
	case frameBlobData:
		return "blob data"
	case frameEnd:
		return "summary"
	case frameChecksum:
		return "checksum"
	}
	return fmt.Sprintf("unknown (%#x)", typ)
}

// reader reads frames, counting and hashing them.
type reader struct {
	src *bufio.Reader
	off int64
	sum hash.Hash
	buf []byte
	err error // sticky: a section reader's failure
}

func (r *reader) corrupt(format string, args ...any) error {
	return &FormatError{Offset: r.off, Msg: fmt.Sprintf(format, args...)}
}

func (r *reader) readFull(p []byte, what string) error {
	n, err := io.ReadFull(r.src, p)
	r.off += int64(n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &FormatError{Offset: r.off, Msg: "the file ends in the middle of " + what, Truncated: true}
	default:
		return fmt.Errorf("read snapshot file: %w", err)
	}
}

func (r *reader) magic() error {
	head := make([]byte, len(Magic)+2)
	n, err := io.ReadFull(r.src, head)
	r.off += int64(n)
	if m := min(n, len(Magic)); n == 0 || string(head[:m]) != Magic[:m] {
		if n == 0 && errors.Is(err, io.EOF) {
			return &FormatError{Msg: "the file is empty", Truncated: true}
		}
		if n == 0 && err != nil {
			return fmt.Errorf("read snapshot file: %w", err)
		}
		return &FormatError{Msg: "this is not a palyra snapshot file (it does not start with the snapshot magic)"}
	}
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &FormatError{Offset: r.off, Msg: "the file ends in its first bytes", Truncated: true}
		}
		return fmt.Errorf("read snapshot file: %w", err)
	}
	r.sum.Write(head)
	switch ver := binary.BigEndian.Uint16(head[len(Magic):]); {
	case ver == 0:
		return r.corrupt("format version 0")
	case ver > FormatVersion:
		return fmt.Errorf("%w (file: format %d, this palyra: %d): restore it with a newer palyra", ErrNewerFormat, ver, FormatVersion)
	}
	return nil
}

// next reads one frame. Its payload is valid until the following call.
// Every frame but the checksum is added to the running sha256.
func (r *reader) next() (byte, []byte, error) {
	if r.err != nil {
		return 0, nil, r.err
	}
	var h [5]byte
	if err := r.readFull(h[:], "a record header"); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, r.corrupt("a %s record claims %d bytes (at most %d)", frameName(h[0]), n, maxFrame)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, 0, n)
	}
	payload := r.buf[:n]
	if err := r.readFull(payload, "a "+frameName(h[0])+" record"); err != nil {
		return 0, nil, err
	}
	if h[0] != frameChecksum {
		r.sum.Write(h[:])
		r.sum.Write(payload)
	}
	return h[0], payload, nil
}

func (r *reader) expect(typ byte, what string) ([]byte, error) {
	t, payload, err := r.next()
	if err != nil {
		return nil, err
	}
	if t != typ {
		return nil, r.corrupt("expected %s, found a %s record", what, frameName(t))
	}
	return payload, nil
}

func (r *reader) decodeJSON(payload []byte, v any, what string) error {
	if err := json.Unmarshal(payload, v); err != nil {
		return r.corrupt("the %s does not decode: %v", what, err)
	}
	return nil
}

// section hands sr to visit, then reads whatever visit left. A format
// error found while reading the section wins over the visitor's error
// (which is usually a consequence of it).
func (r *reader) section(sr io.Reader, visit func(io.Reader) error) error {
	verr := visit(sr)
	if r.err != nil {
		return r.err
	}
	if verr != nil {
		return verr
	}
	if _, err := io.Copy(io.Discard, sr); err != nil {
		return err
	}
	return r.err
}

// stateReader yields the state section's bytes across its frames.
type stateReader struct {
	r     *reader
	cur   []byte
	total uint64
	done  bool
}

func (s *stateReader) Read(p []byte) (int, error) {
	for len(s.cur) == 0 {
		if s.done {
			return 0, io.EOF
		}
		if s.r.err != nil {
			return 0, s.r.err
		}
		typ, payload, err := s.r.next()
		if err != nil {
			s.r.err = err
			return 0, err
		}
		switch typ {
		case frameState:
			s.cur = payload
			s.total += uint64(len(payload))
		case frameStateEnd:
			if len(payload) != 8 || binary.BigEndian.Uint64(payload) != s.total {
				s.r.err = s.r.corrupt("the state section ends after %d bytes but says otherwise", s.total)
				return 0, s.r.err
			}
			if s.total == 0 {
				s.r.err = s.r.corrupt("the state section is empty")
				return 0, s.r.err
			}
			s.done = true
		default:
			s.r.err = s.r.corrupt("expected state, found a %s record", frameName(typ))
			return 0, s.r.err
		}
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

// blobReader yields one blob's bytes and checks its hash at the end.
type blobReader struct {
	r    *reader
	hash string
	want []byte
	left int64
	cur  []byte
	sum  hash.Hash
	done bool
}

func (b *blobReader) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		if b.r.err != nil {
			return 0, b.r.err
		}
		if b.left == 0 {
			if !b.done {
				b.done = true
				if !bytes.Equal(b.sum.Sum(nil), b.want) {
					b.r.err = b.r.corrupt("blob %s does not match its sha256", b.hash)
					return 0, b.r.err
				}
			}
			return 0, io.EOF
		}
		typ, payload, err := b.r.next()
		if err != nil {
			b.r.err = err
			return 0, err
		}
		if typ != frameBlobData {
			b.r.err = b.r.corrupt("blob %s ends %d bytes early", b.hash, b.left)
			return 0, b.r.err
		}
		if int64(len(payload)) > b.left {
			b.r.err = b.r.corrupt("blob %s is longer than it says", b.hash)
			return 0, b.r.err
		}
		b.left -= int64(len(payload))
		b.sum.Write(payload)
		b.cur = payload
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}
