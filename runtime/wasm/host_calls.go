package wasm

import (
	"context"
	"errors"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
	"github.com/palyra-mesh/palyra/runtime/wasm/egress"
)

// httpFetch is palyra_v1.http_fetch: decode the request, fetch it through
// the job's egress policy, write the encoded response if it fits resp_cap.
func httpFetch(ctx context.Context, st *hostState, mem memory, args []uint64) (int64, *callError) {
	reqPtr, reqLen, respPtr, respCap := u32(args[0]), u32(args[1]), u32(args[2]), u32(args[3])
	if reqLen > abi.MaxRequest {
		return 0, callErr(abi.CodeTooLarge, "request is %d bytes, more than the limit of %d", reqLen, abi.MaxRequest)
	}
	raw, cerr := mem.read(reqPtr, reqLen)
	if cerr != nil {
		return 0, cerr
	}
	if cerr := mem.check(respPtr, respCap); cerr != nil {
		return 0, cerr
	}
	req, err := abi.DecodeRequest(raw)
	if err != nil {
		return 0, callErr(abi.CodeBadRequest, "%s", err)
	}
	if st.client == nil {
		st.client = egress.NewClient(st.policy, st.clientOpts)
	}
	resp, err := st.client.Fetch(ctx, req, func(h []abi.Header) int {
		return min(abi.MaxResponseBody, int(respCap)-abi.EncodedHeaderSize(h)-4)
	})
	if err != nil {
		return 0, fetchError(err)
	}
	out := abi.AppendResponse(make([]byte, 0, abi.EncodedHeaderSize(resp.Header)+4+len(resp.Body)), resp)
	if uint64(len(out)) > respCap {
		return 0, callErr(abi.CodeTooLarge, "response is %d bytes, more than the %d-byte buffer", len(out), respCap)
	}
	if cerr := mem.write(respPtr, out); cerr != nil {
		return 0, cerr
	}
	st.log.Debug("palyra_v1 http_fetch", "status", resp.Status, "bytes", len(resp.Body))
	return int64(len(out)), nil
}

// fetchError maps an egress error to a result code.
func fetchError(err error) *callError {
	code, sentinel := abi.CodeNetwork, egress.ErrNetwork
	switch {
	case errors.Is(err, egress.ErrBlocked):
		code, sentinel = abi.CodeNoGrant, egress.ErrBlocked
	case errors.Is(err, egress.ErrBadRequest):
		code, sentinel = abi.CodeBadRequest, egress.ErrBadRequest
	case errors.Is(err, egress.ErrTooLarge):
		code, sentinel = abi.CodeTooLarge, egress.ErrTooLarge
	case errors.Is(err, egress.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code, sentinel = abi.CodeTimeout, egress.ErrTimeout
	}
	// The code already says what the sentinel would: keep only the detail.
	msg := strings.TrimPrefix(firstLine(err.Error()), sentinel.Error()+": ")
	return callErr(code, "%s", msg)
}

// secretGet is palyra_v1.secret_get. The value goes only into guest
// memory: it is never logged and never part of a message.
func secretGet(ctx context.Context, st *hostState, mem memory, args []uint64) (int64, *callError) {
	name, cerr := readName(mem, args[0], args[1], "secret name", abi.MaxSecretName)
	if cerr != nil {
		return 0, cerr
	}
	outPtr, outCap := u32(args[2]), u32(args[3])
	if cerr := mem.check(outPtr, outCap); cerr != nil {
		return 0, cerr
	}
	if !slices.Contains(st.grants.SecretNames, name) {
		return 0, callErr(abi.CodeNoGrant, "secret %q is not granted to this job", clipName(name))
	}
	if st.grants.Secrets == nil {
		st.log.Warn("job was granted secrets but the run has no secret service", "secret", name)
		return 0, callErr(abi.CodeUnavailable, "no secret service is configured on this worker")
	}
	cctx, cancel := context.WithTimeout(ctx, st.callTimeout)
	defer cancel()
	val, err := st.grants.Secrets.Get(cctx, name)
	switch {
	case errors.Is(err, runtime.ErrNotFound):
		return 0, callErr(abi.CodeNotFound, "secret %q does not exist", clipName(name))
	case err != nil && cctx.Err() != nil:
		return 0, callErr(abi.CodeTimeout, "reading secret %q took longer than %v (the worker's host call limit, --host-call-timeout)", clipName(name), st.callTimeout)
	case err != nil:
		// The error is the service's (its contract: no values in errors);
		// the guest gets only a generic message.
		st.log.Warn("secret service failed", "secret", name, "error", err)
		return 0, callErr(abi.CodeUnavailable, "reading secret %q failed on the host", clipName(name))
	}
	st.mask.add(val) // masked in the job's output from now on
	if uint64(len(val)) <= outCap {
		if cerr := mem.write(outPtr, val); cerr != nil {
			return 0, cerr
		}
	}
	st.log.Debug("palyra_v1 secret_get", "secret", name)
	return int64(len(val)), nil
}

// kvGet is palyra_v1.kv_get.
func kvGet(ctx context.Context, st *hostState, mem memory, args []uint64) (int64, *callError) {
	key, cerr := st.grantedKey(mem, args[0], args[1])
	if cerr != nil {
		return 0, cerr
	}
	outPtr, outCap := u32(args[2]), u32(args[3])
	if cerr := mem.check(outPtr, outCap); cerr != nil {
		return 0, cerr
	}
	cctx, cancel := context.WithTimeout(ctx, st.callTimeout)
	defer cancel()
	val, ok, err := st.grants.KV.Get(cctx, key)
	if err != nil {
		return 0, st.kvError(cctx, "reading", key, err)
	}
	if !ok {
		return 0, callErr(abi.CodeNotFound, "key %q does not exist", clipName(key))
	}
	if uint64(len(val)) <= outCap {
		if cerr := mem.write(outPtr, val); cerr != nil {
			return 0, cerr
		}
	}
	return int64(len(val)), nil
}

// kvPut is palyra_v1.kv_put.
func kvPut(ctx context.Context, st *hostState, mem memory, args []uint64) (int64, *callError) {
	key, cerr := st.grantedKey(mem, args[0], args[1])
	if cerr != nil {
		return 0, cerr
	}
	valPtr, valLen := u32(args[2]), u32(args[3])
	if valLen > abi.MaxValue {
		return 0, callErr(abi.CodeTooLarge, "value is %d bytes, more than the limit of %d", valLen, abi.MaxValue)
	}
	val, cerr := mem.read(valPtr, valLen)
	if cerr != nil {
		return 0, cerr
	}
	cctx, cancel := context.WithTimeout(ctx, st.callTimeout)
	defer cancel()
	if strings.ContainsFunc(key, unicode.IsControl) {
		// As the API refuses them: a newline or an escape sequence in a
		// key forged rows of listings, or drove a terminal showing them.
		// (Reads and deletes take any key: one written before can go.)
		return 0, callErr(abi.CodeBadRequest, "key %q holds a control character; keys are printable text", clipName(key))
	}
	if err := st.grants.KV.Put(cctx, key, val); err != nil {
		return 0, st.kvError(cctx, "writing", key, err)
	}
	return 0, nil
}

// kvDelete is palyra_v1.kv_delete.
func kvDelete(ctx context.Context, st *hostState, mem memory, args []uint64) (int64, *callError) {
	key, cerr := st.grantedKey(mem, args[0], args[1])
	if cerr != nil {
		return 0, cerr
	}
	cctx, cancel := context.WithTimeout(ctx, st.callTimeout)
	defer cancel()
	if err := st.grants.KV.Delete(cctx, key); err != nil {
		return 0, st.kvError(cctx, "deleting", key, err)
	}
	return 0, nil
}

// grantedKey reads a key and checks it lies under the job's prefix.
func (st *hostState) grantedKey(mem memory, ptr, n uint64) (string, *callError) {
	key, cerr := readName(mem, ptr, n, "key", abi.MaxKey)
	if cerr != nil {
		return "", cerr
	}
	switch {
	case st.grants.KVPrefix == "":
		return "", callErr(abi.CodeNoGrant, "the job has no key-value grant")
	case !strings.HasPrefix(key, st.grants.KVPrefix):
		return "", callErr(abi.CodeNoGrant, "key %q is outside the job's key-value prefix %q", clipName(key), clipName(st.grants.KVPrefix))
	case st.grants.KV == nil:
		st.log.Warn("job was granted a key-value prefix but the run has no key-value service", "prefix", st.grants.KVPrefix)
		return "", callErr(abi.CodeUnavailable, "no key-value service is configured on this worker")
	}
	return key, nil
}

func (st *hostState) kvError(ctx context.Context, op, key string, err error) *callError {
	if ctx.Err() != nil {
		return callErr(abi.CodeTimeout, "%s key %q took longer than %v (the worker's host call limit, --host-call-timeout)", op, clipName(key), st.callTimeout)
	}
	if errors.Is(err, runtime.ErrRefused) {
		return callErr(abi.CodeBadRequest, "%s key %q was refused: %s", op, clipName(key), firstLine(strings.TrimPrefix(err.Error(), runtime.ErrRefused.Error()+": ")))
	}
	st.log.Warn("key-value service failed", "op", op, "key", key, "error", err)
	return callErr(abi.CodeUnavailable, "%s key %q failed on the host", op, clipName(key))
}

// readName reads a guest string that must be non-empty UTF-8 without NUL
// and at most max bytes.
func readName(mem memory, ptrArg, lenArg uint64, what string, max int) (string, *callError) {
	ptr, n := u32(ptrArg), u32(lenArg)
	if n == 0 || n > uint64(max) {
		return "", callErr(abi.CodeBadRequest, "%s must be 1 to %d bytes, not %d", what, max, n)
	}
	b, cerr := mem.read(ptr, n)
	if cerr != nil {
		return "", cerr
	}
	s := string(b)
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return "", callErr(abi.CodeBadRequest, "%s is not UTF-8 text without NUL bytes", what)
	}
	return s, nil
}
