package wasm

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
	"github.com/palyra-mesh/palyra/runtime/wasm/egress"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// hostModule is the palyra_v1 import namespace (ABI.md documents it).
const hostModule = abi.Module

// callError is a failed palyra_v1 call: a code for the guest and a one-line
// message it can read with last_error. Messages never hold secret values.
type callError struct {
	code abi.Code
	msg  string
}

func (e *callError) Error() string { return e.code.String() + ": " + e.msg }

func callErr(code abi.Code, format string, args ...any) *callError {
	return &callError{code: code, msg: fmt.Sprintf(format, args...)}
}

// hostFunc is one palyra_v1 function. call returns a non-negative result
// or a *callError.
type hostFunc struct {
	name      string
	params    []string // all i32
	result    api.ValueType
	call      func(ctx context.Context, st *hostState, mem memory, args []uint64) (int64, *callError)
	clearsErr bool // whether calling it clears the last error message
}

// hostFuncs is palyra_v1 in full; signatures are part of the ABI.
var hostFuncs = []hostFunc{
	{abi.FnHTTPFetch, []string{"req_ptr", "req_len", "resp_ptr", "resp_cap"}, api.ValueTypeI64, httpFetch, true},
	{abi.FnSecretGet, []string{"name_ptr", "name_len", "out_ptr", "out_cap"}, api.ValueTypeI64, secretGet, true},
	{abi.FnKVGet, []string{"key_ptr", "key_len", "out_ptr", "out_cap"}, api.ValueTypeI64, kvGet, true},
	{abi.FnKVPut, []string{"key_ptr", "key_len", "val_ptr", "val_len"}, api.ValueTypeI64, kvPut, true},
	{abi.FnKVDelete, []string{"key_ptr", "key_len"}, api.ValueTypeI64, kvDelete, true},
	{abi.FnLastError, []string{"out_ptr", "out_cap"}, api.ValueTypeI32, lastError, false},
}

// instantiateHost adds palyra_v1 to rt. The functions find the run they
// serve through their context (see hostState), so one instance serves
// every run.
func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(hostModule)
	for _, f := range hostFuncs {
		params := make([]api.ValueType, len(f.params))
		for i := range params {
			params[i] = api.ValueTypeI32
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(f.goFunc(), params, []api.ValueType{f.result}).
			WithParameterNames(f.params...).
			Export(f.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// goFunc adapts f to wazero: it finds the run's state, runs the call and
// stores its result. When the run's context has ended (timeout, cancel,
// shutdown) it unwinds the guest at once, as sleeper does, instead of
// returning into guest code that would only be stopped later.
func (f hostFunc) goFunc() api.GoModuleFunc {
	return func(ctx context.Context, m api.Module, stack []uint64) {
		st, _ := ctx.Value(hostStateKey{}).(*hostState)
		var res int64
		var cerr *callError
		if st == nil {
			cerr = callErr(abi.CodeUnavailable, "palyra_v1 is not available in this context")
		} else {
			if f.clearsErr {
				st.lastErr = ""
			}
			args := make([]uint64, len(f.params))
			copy(args, stack)
			res, cerr = f.call(ctx, st, guestMemory(m), args)
		}
		if ctx.Err() != nil {
			panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
		}
		if cerr != nil {
			res = int64(cerr.code)
			if st != nil {
				st.lastErr = clipMessage(cerr.Error())
				st.log.Debug("palyra_v1 call failed", "func", f.name, "code", int64(cerr.code), "error", st.lastErr)
			}
		}
		if f.result == api.ValueTypeI32 {
			stack[0] = api.EncodeI32(int32(res))
		} else {
			stack[0] = api.EncodeI64(res)
		}
	}
}

// clipMessage bounds a last_error message to abi.MaxErrorMessage bytes on
// a rune boundary.
func clipMessage(s string) string { return cutRunes(s, abi.MaxErrorMessage) }

// cutRunes returns s cut to at most n bytes, on a rune boundary.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// hostStateKey is the context key of a run's *hostState.
type hostStateKey struct{}

// hostState is one run's view of palyra_v1: its grants and the services
// behind them. It is used only from the guest's goroutine.
type hostState struct {
	log         *slog.Logger
	grants      runtime.Grants
	policy      *egress.Policy
	clientOpts  egress.Options
	client      *egress.Client // created at the first fetch
	callTimeout time.Duration  // per secret or key-value call
	lastErr     string
	// mask holds the secret values the run read, masked in its output.
	mask *secretMask
}

// newHostState checks a Spec's grants and builds its run state. An error
// is the job's fault and names the fix.
func (e *Executor) newHostState(spec runtime.Spec) (*hostState, error) {
	policy, err := egress.NewPolicy(spec.AllowHosts, spec.AllowPrivate)
	if err != nil {
		return nil, err
	}
	policy.From(spec.GrantsFrom)
	st := &hostState{
		mask:        &secretMask{},
		log:         e.log,
		policy:      policy,
		clientOpts:  egress.Options{Resolver: e.cfg.resolver, Timeout: e.cfg.HostCallTimeout},
		callTimeout: e.cfg.HostCallTimeout,
	}
	if spec.Grants != nil {
		st.grants = *spec.Grants
		st.grants.SecretNames = slices.Clone(spec.Grants.SecretNames)
		for _, n := range st.grants.SecretNames {
			if n == "" || len(n) > abi.MaxSecretName || !utf8.ValidString(n) {
				return nil, fmt.Errorf("granted secret name %q is empty, longer than %d bytes or not UTF-8; grant valid names", clipName(n), abi.MaxSecretName)
			}
		}
		if strings.ContainsRune(st.grants.KVPrefix, 0) || !utf8.ValidString(st.grants.KVPrefix) {
			return nil, fmt.Errorf("granted key-value prefix is not valid UTF-8 text; grant a plain prefix like jobs/<id>/")
		}
	}
	return st, nil
}

// close releases what the run's calls opened.
func (st *hostState) close() {
	if st.client != nil {
		st.client.Close()
	}
}

// guestMemory is m's linear memory for the host calls; m.m is nil when
// the module has none. wazero returns a typed nil pointer in the interface
// for a module without memory, which a nil check does not see (a host call
// from such a module crashed the run with a nil dereference).
func guestMemory(m api.Module) memory {
	mm := m.Memory()
	if mm == nil {
		return memory{}
	}
	if v := reflect.ValueOf(mm); v.Kind() == reflect.Pointer && v.IsNil() {
		return memory{}
	}
	return memory{mm}
}

// memory wraps a guest's linear memory for the host calls.
type memory struct{ m api.Memory }

// read copies len bytes at ptr out of guest memory.
func (mem memory) read(ptr, n uint64) ([]byte, *callError) {
	if mem.m == nil {
		return nil, callErr(abi.CodeMemory, "the module has no memory")
	}
	view, ok := mem.m.Read(uint32(ptr), uint32(n))
	if !ok {
		return nil, callErr(abi.CodeMemory, "range [%d, %d) is outside the guest's memory", ptr, ptr+n)
	}
	return slices.Clone(view), nil
}

// check reports whether [ptr, ptr+n) lies in guest memory.
func (mem memory) check(ptr, n uint64) *callError {
	if mem.m == nil {
		return callErr(abi.CodeMemory, "the module has no memory")
	}
	if ptr+n > uint64(mem.m.Size()) {
		return callErr(abi.CodeMemory, "range [%d, %d) is outside the guest's memory", ptr, ptr+n)
	}
	return nil
}

// write copies b to ptr, which must have room for it.
func (mem memory) write(ptr uint64, b []byte) *callError {
	if err := mem.check(ptr, uint64(len(b))); err != nil {
		return err
	}
	if !mem.m.Write(uint32(ptr), b) {
		return callErr(abi.CodeMemory, "range [%d, %d) is outside the guest's memory", ptr, ptr+uint64(len(b)))
	}
	return nil
}

// lastError copies the message of the last failed call into the guest.
func lastError(_ context.Context, st *hostState, mem memory, args []uint64) (int64, *callError) {
	out, outCap := u32(args[0]), u32(args[1])
	if cerr := mem.check(out, outCap); cerr != nil {
		return 0, cerr
	}
	msg := []byte(st.lastErr)
	if len(msg) <= int(outCap) {
		if err := mem.write(out, msg); err != nil {
			return 0, err
		}
	}
	return int64(len(msg)), nil
}

// u32 decodes an i32 argument as an unsigned pointer or length.
func u32(v uint64) uint64 { return uint64(api.DecodeU32(v)) }

// clipName bounds a guest-supplied name quoted in a message.
func clipName(s string) string {
	if len(s) <= 128 {
		return s
	}
	return cutRunes(s, 128) + "…"
}
