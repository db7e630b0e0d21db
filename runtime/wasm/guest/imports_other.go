//go:build !wasm

package guest

// available reports whether the palyra_v1 imports exist in this build:
// outside wasm they do not, and every call returns ErrUnsupported.
const available = false

func httpFetch(req, resp []byte) int64        { return int64(unsupportedCode) }
func secretGet(name string, out []byte) int64 { return int64(unsupportedCode) }
func kvGet(key string, out []byte) int64      { return int64(unsupportedCode) }
func kvPut(key string, val []byte) int64      { return int64(unsupportedCode) }
func kvDelete(key string) int64               { return int64(unsupportedCode) }
func lastErrorCall(out []byte) int64          { return 0 }

// unsupportedCode is never returned by a host; it maps to ErrUnsupported.
const unsupportedCode = -1 << 32
