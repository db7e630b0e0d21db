// Package guest is the Go SDK for Palyra WebAssembly jobs: it calls the
// host's palyra_v1 functions (HTTP egress, secrets, key-value storage)
// from a program built with GOOS=wasip1 GOARCH=wasm.
//
// Every capability must be granted to the job; a call without the grant
// returns an error matching ErrNoGrant (it never crashes the job), and
// errors.Is tells the other failures apart. Outside wasm the functions
// return ErrUnsupported, so code using the package still compiles and
// tests on the host.
//
//	resp, err := guest.Get("https://api.example.com/v1/items")
//	if errors.Is(err, guest.ErrNoGrant) { ... } // the job lacks allow_hosts
//
// The ABI underneath is documented in runtime/wasm/ABI.md.
package guest

import (
	"errors"
	"strings"

	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
)

// Errors the functions return, wrapped in *Error; match with errors.Is.
var (
	ErrNoGrant     = errors.New("capability not granted")
	ErrBadRequest  = errors.New("bad request")
	ErrNotFound    = errors.New("not found")
	ErrTooLarge    = errors.New("too large")
	ErrNetwork     = errors.New("network error")
	ErrTimeout     = errors.New("timed out")
	ErrUnavailable = errors.New("host service unavailable")
	ErrMemory      = errors.New("bad memory range")
	// ErrUnsupported: not running as a Palyra wasm job (or an unknown
	// result code from a newer host).
	ErrUnsupported = errors.New("palyra_v1 host functions are not available")
)

// Error is a failed host call.
type Error struct {
	Op      string   // the palyra_v1 function, e.g. "http_fetch"
	Code    abi.Code // the ABI result code
	Message string   // the host's explanation, e.g. `no grant: host "x" is not in the job's --allow-host list`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Op + ": " + e.Code.String()
	}
	return e.Op + ": " + e.Message
}

// Unwrap returns the sentinel error for Code.
func (e *Error) Unwrap() error {
	switch e.Code {
	case abi.CodeNoGrant:
		return ErrNoGrant
	case abi.CodeBadRequest:
		return ErrBadRequest
	case abi.CodeNotFound:
		return ErrNotFound
	case abi.CodeTooLarge:
		return ErrTooLarge
	case abi.CodeNetwork:
		return ErrNetwork
	case abi.CodeTimeout:
		return ErrTimeout
	case abi.CodeUnavailable:
		return ErrUnavailable
	case abi.CodeMemory:
		return ErrMemory
	}
	return ErrUnsupported
}

// callError builds the error for a negative result r of op, with the
// host's message.
func callError(op string, r int64) error {
	return &Error{Op: op, Code: abi.Code(r), Message: lastError()}
}

// Header is one HTTP header field.
type Header = abi.Header

// Request is an HTTP request. The job's allow_hosts must admit the URL's
// host; private addresses also need allow_private.
type Request struct {
	Method string // "" means GET
	URL    string
	Header []Header
	Body   []byte
	// MaxResponseSize bounds the response body this call accepts, in
	// bytes: 0 means 1 MiB; at most 4 MiB. A longer body is ErrTooLarge.
	MaxResponseSize int
}

// Response is an HTTP response. Header fields are sorted by name.
type Response struct {
	Status int
	Header []Header
	Body   []byte
}

// HeaderValue returns the first value of the named header field
// (case-insensitive), or "".
func (r *Response) HeaderValue(name string) string {
	for _, h := range r.Header {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

const defaultMaxResponse = 1 << 20

// Fetch performs req through the host and returns the response; any HTTP
// status is a response, not an error. Redirects are followed (at most
// 10, each within the grants).
func Fetch(req Request) (*Response, error) {
	if !available {
		return nil, ErrUnsupported
	}
	max := req.MaxResponseSize
	if max <= 0 {
		max = defaultMaxResponse
	}
	max = min(max, abi.MaxResponseBody)
	enc := abi.AppendRequest(nil, abi.Request{Method: req.Method, URL: req.URL, Header: req.Header, Body: req.Body})
	buf := make([]byte, max+abi.ResponseOverhead)
	n := httpFetch(enc, buf)
	if n < 0 {
		return nil, callError(abi.FnHTTPFetch, n)
	}
	resp, err := abi.DecodeResponse(buf[:n])
	if err != nil {
		return nil, &Error{Op: abi.FnHTTPFetch, Code: abi.CodeBadRequest, Message: err.Error()}
	}
	return &Response{Status: resp.Status, Header: resp.Header, Body: resp.Body}, nil
}

// Get fetches url with GET.
func Get(url string) (*Response, error) { return Fetch(Request{URL: url}) }

// Secret returns the value of a secret granted to the job by name.
func Secret(name string) ([]byte, error) {
	if !available {
		return nil, ErrUnsupported
	}
	return readSized(abi.FnSecretGet, 256, func(out []byte) int64 { return secretGet(name, out) })
}

// KVGet returns the value stored under key (an error matching ErrNotFound
// if there is none). The key must start with the job's granted prefix.
func KVGet(key string) ([]byte, error) {
	if !available {
		return nil, ErrUnsupported
	}
	return readSized(abi.FnKVGet, 1024, func(out []byte) int64 { return kvGet(key, out) })
}

// KVPut stores val under key (at most 64 KiB).
func KVPut(key string, val []byte) error {
	if !available {
		return ErrUnsupported
	}
	if r := kvPut(key, val); r < 0 {
		return callError(abi.FnKVPut, r)
	}
	return nil
}

// KVDelete removes key; a missing key is not an error.
func KVDelete(key string) error {
	if !available {
		return ErrUnsupported
	}
	if r := kvDelete(key); r < 0 {
		return callError(abi.FnKVDelete, r)
	}
	return nil
}

// readSized calls a "length, written only if it fits" function, growing
// the buffer to the reported length (a value may change between calls).
func readSized(op string, guess int, call func(out []byte) int64) ([]byte, error) {
	buf := make([]byte, guess)
	for range 4 {
		n := call(buf)
		switch {
		case n < 0:
			return nil, callError(op, n)
		case n <= int64(len(buf)):
			return buf[:n], nil
		}
		buf = make([]byte, n)
	}
	return nil, &Error{Op: op, Code: abi.CodeTooLarge, Message: "the value kept changing size"}
}

// lastError returns the host's message for the last failed call.
func lastError() string {
	buf := make([]byte, abi.MaxErrorMessage)
	n := lastErrorCall(buf)
	if n < 0 || int(n) > len(buf) {
		return ""
	}
	return string(buf[:n])
}
