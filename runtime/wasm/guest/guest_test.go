package guest

import (
	"errors"
	"testing"

	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
)

// Outside wasm (where this test runs) every call says so.
func TestUnsupportedOutsideWasm(t *testing.T) {
	if _, err := Get("https://example.com/"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Get = %v", err)
	}
	if _, err := Secret("x"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Secret = %v", err)
	}
	if _, err := KVGet("k"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("KVGet = %v", err)
	}
	if err := KVPut("k", nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("KVPut = %v", err)
	}
	if err := KVDelete("k"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("KVDelete = %v", err)
	}
}

func TestErrorMatchesItsSentinel(t *testing.T) {
	for code, want := range map[abi.Code]error{
		abi.CodeNoGrant: ErrNoGrant, abi.CodeBadRequest: ErrBadRequest, abi.CodeMemory: ErrMemory,
		abi.CodeNotFound: ErrNotFound, abi.CodeTooLarge: ErrTooLarge, abi.CodeNetwork: ErrNetwork,
		abi.CodeTimeout: ErrTimeout, abi.CodeUnavailable: ErrUnavailable, abi.Code(-99): ErrUnsupported,
	} {
		err := error(&Error{Op: "kv_get", Code: code, Message: "m"})
		if !errors.Is(err, want) {
			t.Errorf("code %d does not match %v", code, want)
		}
	}
	e := &Error{Op: "secret_get", Code: abi.CodeNoGrant}
	if e.Error() != "secret_get: no grant" {
		t.Errorf("Error() = %q", e.Error())
	}
}

func TestReadSizedGrows(t *testing.T) {
	val := []byte("a value longer than the first guess")
	calls := 0
	got, err := readSized("kv_get", 4, func(out []byte) int64 {
		calls++
		if len(out) >= len(val) {
			copy(out, val)
		}
		return int64(len(val))
	})
	if err != nil || string(got) != string(val) || calls != 2 {
		t.Errorf("readSized = %q, %v after %d calls", got, err, calls)
	}
}

func TestHeaderValue(t *testing.T) {
	r := &Response{Header: []Header{{Name: "Content-Type", Value: "text/plain"}, {Name: "X", Value: "1"}, {Name: "X", Value: "2"}}}
	if r.HeaderValue("content-type") != "text/plain" || r.HeaderValue("x") != "1" || r.HeaderValue("y") != "" {
		t.Errorf("HeaderValue mismatch")
	}
}
