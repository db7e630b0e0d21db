// Package abi is the palyra_v1 host interface shared by the wasm executor
// (the host) and the guest SDK: the import module's name, its function
// names, result codes, size limits and the byte layout of HTTP requests
// and responses. runtime/wasm/ABI.md documents it for guests written in
// any language.
//
// The package is pure Go with no dependencies beyond the standard
// library's smallest packages, so it compiles into guests cheaply.
package abi

// Module is the import module name. A breaking change gets a new name
// (palyra_v2); palyra_v1 only ever gains functions.
const Module = "palyra_v1"

// Function names exported by Module.
const (
	FnHTTPFetch = "http_fetch" // (req_ptr, req_len, resp_ptr, resp_cap i32) -> i64
	FnSecretGet = "secret_get" // (name_ptr, name_len, out_ptr, out_cap i32) -> i64
	FnKVGet     = "kv_get"     // (key_ptr, key_len, out_ptr, out_cap i32) -> i64
	FnKVPut     = "kv_put"     // (key_ptr, key_len, val_ptr, val_len i32) -> i64
	FnKVDelete  = "kv_delete"  // (key_ptr, key_len i32) -> i64
	FnLastError = "last_error" // (out_ptr, out_cap i32) -> i32
)

// Code is a negative result of a palyra_v1 call. Non-negative results are
// successes (usually a length).
type Code int64

// Result codes. They are part of the ABI: never renumber one.
const (
	// CodeNoGrant: the job lacks the capability (host not in allow_hosts,
	// private address without allow_private, secret name not granted, key
	// outside the granted prefix, capability not configured).
	CodeNoGrant Code = -1
	// CodeBadRequest: the arguments are malformed (undecodable request, bad
	// URL or method, forbidden header, empty or invalid key or name).
	CodeBadRequest Code = -2
	// CodeMemory: a pointer/length pair lies outside the guest's memory.
	CodeMemory Code = -3
	// CodeNotFound: no such secret or key.
	CodeNotFound Code = -4
	// CodeTooLarge: a request, response or value exceeds its limit or the
	// guest's buffer (http_fetch only; see ABI.md).
	CodeTooLarge Code = -5
	// CodeNetwork: DNS, connection, TLS or protocol failure, or too many
	// redirects.
	CodeNetwork Code = -6
	// CodeTimeout: the call's own time limit passed.
	CodeTimeout Code = -7
	// CodeUnavailable: the host service behind the capability failed.
	CodeUnavailable Code = -8
)

// String is the code's short name, used in messages.
func (c Code) String() string {
	switch c {
	case CodeNoGrant:
		return "no grant"
	case CodeBadRequest:
		return "bad request"
	case CodeMemory:
		return "bad memory range"
	case CodeNotFound:
		return "not found"
	case CodeTooLarge:
		return "too large"
	case CodeNetwork:
		return "network error"
	case CodeTimeout:
		return "timed out"
	case CodeUnavailable:
		return "service unavailable"
	}
	return "unknown error"
}

// Limits. The host refuses anything larger with CodeTooLarge (or
// CodeBadRequest for names and keys).
const (
	MaxRequestBody   = 4 << 20  // bytes of an HTTP request body
	MaxResponseBody  = 4 << 20  // bytes of an HTTP response body
	MaxHeaderBytes   = 64 << 10 // bytes of all header names and values, each way
	MaxHeaders       = 100      // header fields, each way
	MaxURL           = 8 << 10  // bytes of a URL
	MaxMethod        = 16       // bytes of an HTTP method
	MaxRequest       = MaxRequestBody + MaxHeaderBytes + MaxURL + MaxMethod + 16
	MaxSecretName    = 256      // bytes of a secret name (set now: at most 128; older ones up to 256)
	MaxKey           = 512      // bytes of a key-value key (consensus.MaxKVKey)
	MaxValue         = 64 << 10 // bytes of a key-value value (consensus.MaxKVValue)
	MaxErrorMessage  = 512      // bytes of a last_error message
	ResponseOverhead = MaxHeaderBytes + 8*MaxHeaders + 12
)
