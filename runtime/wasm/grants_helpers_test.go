package wasm

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/palyra-mesh/palyra/runtime"
)

// memSecrets is an in-memory runtime.Secrets.
type memSecrets map[string][]byte

func (s memSecrets) Get(_ context.Context, name string) ([]byte, error) {
	v, ok := s[name]
	if !ok {
		return nil, runtime.ErrNotFound
	}
	return bytes.Clone(v), nil
}

// memKV is an in-memory runtime.KV.
type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newMemKV() *memKV { return &memKV{m: map[string][]byte{}} }

func (kv *memKV) Get(_ context.Context, key string) ([]byte, bool, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	v, ok := kv.m[key]
	return bytes.Clone(v), ok, nil
}

func (kv *memKV) Put(_ context.Context, key string, val []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.m[key] = bytes.Clone(val)
	return nil
}

func (kv *memKV) Delete(_ context.Context, key string) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	delete(kv.m, key)
	return nil
}

func (kv *memKV) get(key string) (string, bool) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	v, ok := kv.m[key]
	return string(v), ok
}

// fakeResolver answers from a fixed table.
type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &netError{"no such host " + host}
}

type netError struct{ s string }

func (e *netError) Error() string { return e.s }

// logBuffer collects every record an executor logs, at all levels.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// hostCallModule imports palyra_v1.<name> (len(args) i32 parameters, one
// result of type result), calls it once with args and traps unless it
// returns want. data is placed in its single memory page.
// hostCallModuleNoMemory is hostCallModule for a module without memory.
func hostCallModuleNoMemory(name string, args []int32, result byte, want int32) []byte {
	return hostCallModuleWith(name, args, result, want, false)
}

func hostCallModule(name string, args []int32, result byte, want int32, data ...testData) []byte {
	return hostCallModuleWith(name, args, result, want, true, data...)
}

func hostCallModuleWith(name string, args []int32, result byte, want int32, withMemory bool, data ...testData) []byte {
	params := bytes.Repeat([]byte{i32}, len(args))
	var code []byte
	for _, a := range args {
		code = append(code, opI32Const)
		code = append(code, sleb(a)...)
	}
	code = append(code, opCall, 0)
	ne := byte(0x47) // i32.ne
	constOp := byte(opI32Const)
	if result == i64 {
		ne, constOp = 0x52, 0x42 // i64.ne, i64.const
	}
	code = append(code, constOp)
	code = append(code, sleb(want)...)
	code = append(code, ne, opIf, blockVoid, opUnreachable, opEnd)
	m := testModule{
		types:   []funcType{{params: params, results: []byte{result}}, {}},
		imports: []testImport{{module: hostModule, name: name, kind: importFunc, typeIdx: 0}},
		funcs:   []testFunc{{typeIdx: 1, code: code}},
		memory:  []uint32{1},
		exports: []testExport{{"_start", 0, 1}, {"memory", 2, 0}},
		data:    data,
	}
	if !withMemory {
		m.memory, m.exports = nil, m.exports[:1]
	}
	return m.bytes()
}

const i64 = 0x7e

// lines joins what a run wrote, for assertions over everything visible.
func everything(res runtime.Result, logs string) string {
	return strings.Join([]string{string(res.Stdout), string(res.Stderr), res.Message, logs}, "\n")
}

// refusingKV is a store that refuses every write for good (full).
type refusingKV struct{ *memKV }

func (refusingKV) Put(context.Context, string, []byte) error {
	return fmt.Errorf("%w: the key-value store holds 100000 entries, its limit", runtime.ErrRefused)
}

// tapText is all a tap holds, stdout then stderr.
func tapText(t *testing.T, tap *runtime.Tap) string {
	t.Helper()
	out, _ := tap.Read([2]int64{0, 0}, 1<<20)
	return string(out[0].Data) + string(out[1].Data)
}
