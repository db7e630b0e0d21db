package abi

import (
	"encoding/binary"
	"errors"
	"strconv"
)

// Header is one HTTP header field. Repeated names are repeated fields.
type Header struct{ Name, Value string }

// Request is an HTTP request as a guest sends it to http_fetch.
type Request struct {
	Method string // "" means GET
	URL    string
	Header []Header
	Body   []byte
}

// Response is what http_fetch writes back.
type Response struct {
	Status int
	Header []Header
	Body   []byte
}

// The layouts (all integers u32 little-endian; str = u32 length + bytes):
//
//	request:  str method, str url, u32 n, n × (str name, str value), str body
//	response: u32 status, u32 n, n × (str name, str value), str body
//
// Both must be consumed exactly: trailing bytes are an error.

// ErrMalformed is returned by the decoders for bytes that do not follow
// the layout or exceed a limit.
var ErrMalformed = errors.New("malformed palyra_v1 message")

// AppendRequest appends r's encoding to b.
func AppendRequest(b []byte, r Request) []byte {
	b = appendStr(b, r.Method)
	b = appendStr(b, r.URL)
	b = appendHeaders(b, r.Header)
	return appendBytes(b, r.Body)
}

// AppendResponse appends r's encoding to b.
func AppendResponse(b []byte, r Response) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Status))
	b = appendHeaders(b, r.Header)
	return appendBytes(b, r.Body)
}

// EncodedHeaderSize is how many bytes AppendResponse spends on a
// response's status and headers (everything but the body and its length).
func EncodedHeaderSize(h []Header) int {
	n := 8
	for _, f := range h {
		n += 8 + len(f.Name) + len(f.Value)
	}
	return n
}

// DecodeRequest parses a request, enforcing the limits above. The result
// copies nothing: its Body aliases b.
func DecodeRequest(b []byte) (Request, error) {
	d := decoder{b: b}
	var r Request
	r.Method = string(d.bytes("method", MaxMethod))
	r.URL = string(d.bytes("url", MaxURL))
	r.Header = d.headers()
	r.Body = d.bytes("body", MaxRequestBody)
	return r, d.finish()
}

// DecodeResponse parses a response. Its Body aliases b.
func DecodeResponse(b []byte) (Response, error) {
	d := decoder{b: b}
	var r Response
	status := d.u32("status")
	if d.err == nil && (status < 100 || status > 999) {
		d.fail("status " + strconv.FormatUint(uint64(status), 10) + " is not an HTTP status")
	}
	r.Status = int(status)
	r.Header = d.headers()
	r.Body = d.bytes("body", MaxResponseBody)
	return r, d.finish()
}

func appendStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

func appendHeaders(b []byte, h []Header) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h)))
	for _, f := range h {
		b = appendStr(b, f.Name)
		b = appendStr(b, f.Value)
	}
	return b
}

// decoder reads a layout; the first error sticks and later reads return
// zero values.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = malformedError(msg)
	}
}

// malformedError says what is wrong with a message; it matches ErrMalformed.
type malformedError string

func (e malformedError) Error() string        { return ErrMalformed.Error() + ": " + string(e) }
func (e malformedError) Is(target error) bool { return target == ErrMalformed }

func (d *decoder) u32(what string) uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 4 {
		d.fail(what + ": truncated")
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) bytes(what string, max int) []byte {
	n := d.u32(what + " length")
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		d.fail(what + " is " + strconv.FormatUint(uint64(n), 10) + " bytes, more than the limit of " + strconv.Itoa(max))
		return nil
	}
	if uint64(n) > uint64(len(d.b)-d.off) {
		d.fail(what + ": truncated")
		return nil
	}
	p := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return p
}

func (d *decoder) headers() []Header {
	n := d.u32("header count")
	if d.err != nil {
		return nil
	}
	if n > MaxHeaders {
		d.fail(strconv.FormatUint(uint64(n), 10) + " headers, more than the limit of " + strconv.Itoa(MaxHeaders))
		return nil
	}
	h := make([]Header, 0, n)
	total := 0
	for range n {
		name := d.bytes("header name", MaxHeaderBytes)
		value := d.bytes("header value", MaxHeaderBytes)
		if d.err != nil {
			return nil
		}
		if total += len(name) + len(value); total > MaxHeaderBytes {
			d.fail("headers exceed " + strconv.Itoa(MaxHeaderBytes) + " bytes")
			return nil
		}
		h = append(h, Header{Name: string(name), Value: string(value)})
	}
	return h
}

func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail(strconv.Itoa(len(d.b)-d.off) + " trailing bytes")
	}
	return d.err
}
