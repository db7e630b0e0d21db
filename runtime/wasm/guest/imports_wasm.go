package guest

import (
	"runtime"
	"unsafe"
)

// available reports whether the palyra_v1 imports exist in this build.
const available = true

//go:wasmimport palyra_v1 http_fetch
func palyraHTTPFetch(reqPtr unsafe.Pointer, reqLen uint32, respPtr unsafe.Pointer, respCap uint32) int64

//go:wasmimport palyra_v1 secret_get
func palyraSecretGet(namePtr unsafe.Pointer, nameLen uint32, outPtr unsafe.Pointer, outCap uint32) int64

//go:wasmimport palyra_v1 kv_get
func palyraKVGet(keyPtr unsafe.Pointer, keyLen uint32, outPtr unsafe.Pointer, outCap uint32) int64

//go:wasmimport palyra_v1 kv_put
func palyraKVPut(keyPtr unsafe.Pointer, keyLen uint32, valPtr unsafe.Pointer, valLen uint32) int64

//go:wasmimport palyra_v1 kv_delete
func palyraKVDelete(keyPtr unsafe.Pointer, keyLen uint32) int64

//go:wasmimport palyra_v1 last_error
func palyraLastError(outPtr unsafe.Pointer, outCap uint32) int32

// ptr is the address of b's first byte (nil when b is empty).
func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

func strPtr(s string) unsafe.Pointer {
	if s == "" {
		return nil
	}
	return unsafe.Pointer(unsafe.StringData(s))
}

func httpFetch(req, resp []byte) int64 {
	n := palyraHTTPFetch(ptr(req), uint32(len(req)), ptr(resp), uint32(len(resp)))
	runtime.KeepAlive(req)
	runtime.KeepAlive(resp)
	return n
}

func secretGet(name string, out []byte) int64 {
	n := palyraSecretGet(strPtr(name), uint32(len(name)), ptr(out), uint32(len(out)))
	runtime.KeepAlive(name)
	runtime.KeepAlive(out)
	return n
}

func kvGet(key string, out []byte) int64 {
	n := palyraKVGet(strPtr(key), uint32(len(key)), ptr(out), uint32(len(out)))
	runtime.KeepAlive(key)
	runtime.KeepAlive(out)
	return n
}

func kvPut(key string, val []byte) int64 {
	n := palyraKVPut(strPtr(key), uint32(len(key)), ptr(val), uint32(len(val)))
	runtime.KeepAlive(key)
	runtime.KeepAlive(val)
	return n
}

func kvDelete(key string) int64 {
	n := palyraKVDelete(strPtr(key), uint32(len(key)))
	runtime.KeepAlive(key)
	return n
}

func lastErrorCall(out []byte) int64 {
	n := palyraLastError(ptr(out), uint32(len(out)))
	runtime.KeepAlive(out)
	return int64(n)
}
