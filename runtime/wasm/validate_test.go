package wasm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime"
)

func TestValidateAccepts(t *testing.T) {
	e := newExecutor(t, Config{})
	for name, mod := range map[string][]byte{
		"reverse":   testwasm.Build(t, "reverse"),
		"trivial":   trivialModule,
		"proc_exit": procExitModule(0),
		"table":     tableGrowModule(1),
		"names": append(bytes.Clone(trivialModule), section(sectionCustom,
			append(wname("name"), append([]byte{1}, vecOf(append(uleb(1), append(uleb(0), wname("start")...)...))...)...))...),
	} {
		if err := e.Validate(context.Background(), mod); err != nil {
			t.Errorf("Validate(%s) = %v, want nil", name, err)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	e := newExecutor(t, Config{})
	reverse := testwasm.Build(t, "reverse")
	oversized := make([]byte, MaxModuleSize+1)
	copy(oversized, trivialModule)
	version2 := bytes.Clone(trivialModule)
	version2[4] = 2

	withImport := func(im testImport) []byte {
		return testModule{
			types:   []funcType{{}, {params: []byte{i32}}},
			imports: []testImport{im},
			funcs:   []testFunc{{typeIdx: 0}},
			exports: []testExport{{"_start", 0, 1}},
		}.bytes()
	}
	startWithParam := testModule{
		types: []funcType{{params: []byte{i32}}}, funcs: []testFunc{{}},
		exports: []testExport{{"_start", 0, 0}},
	}.bytes()

	for _, tc := range []struct {
		name   string
		module []byte
		want   []string
	}{
		{"empty", nil, []string{"empty module", "GOOS=wasip1 GOARCH=wasm"}},
		{"garbage", []byte("this is not wasm at all"), []string{"not a WebAssembly module (bad magic); build with GOOS=wasip1 GOARCH=wasm or clang --target=wasm32-wasi"}},
		{"elf", []byte("\x7fELF\x02\x01\x01\x00"), []string{"bad magic"}},
		{"header only magic", []byte("\x00asm"), []string{"truncated module"}},
		{"version 2", version2, []string{"unsupported WebAssembly binary version 2", "components"}},
		{"too big", oversized, []string{"module is 16777217 bytes, more than the 16 MiB limit"}},
		{"truncated", reverse[:len(reverse)/2], []string{"module is malformed: code section: unexpected end of module", "corrupt or truncated"}},
		{"truncated small", trivialModule[:len(trivialModule)-3], []string{"module is malformed"}},
		{"type error", command(opI32Const, 0), []string{"module does not compile", "too many results"}},
		// 51 bytes declaring 2^28-1 imports: wazero alone allocates 28 GB
		// for this and the process dies (found by FuzzValidate).
		{"import count bomb", []byte("\x00asm\x01\x00\x00\x00\x02\x04\xff\xff\xff\x7f\x00`\x01\x00\x05\x03\x01\x00\x01\a\x13\x02\x06_start\x00\x00\x06memory\x02\x00\n\x05\x01\x03\x00\x00\v"),
			[]string{"module exceeds an implementation limit: import section: 268435455 imports, more than the limit of 100000"}},
		{"count beyond section", append(append([]byte{}, wasmHeader()...), section(sectionFunction, uleb(1000))...),
			[]string{"module is malformed: function section: 1000 functions declared, but only 0 bytes follow"}},
		{"too many locals", command2(append(uleb(1), append(uleb(60000), i32)...)), []string{"60000 locals in one function, more than the limit of 50000"}},
		{"huge table", testModule{
			types: []funcType{{}}, funcs: []testFunc{{}}, tables: [][]uint32{{1 << 21}},
			exports: []testExport{{"_start", 0, 0}},
		}.bytes(), []string{"2097152 initial table entries, more than the limit of 1048576"}},
		{"name section bomb", append(bytes.Clone(trivialModule), section(sectionCustom, append(wname("name"), append([]byte{1}, vecOf(append(uleb(0xfffffff), 0, 0))...)...))...),
			[]string{"module exceeds an implementation limit", "names"}},
		{"name subsection leftovers", append(bytes.Clone(trivialModule), section(sectionCustom, append(wname("name"), append([]byte{0}, vecOf(append(wname("m"), 1, 0xff, 0xff, 0xff, 0x7f))...)...))...),
			[]string{"module is malformed", "bytes left over"}},
		{"gc type", append(append([]byte{}, wasmHeader()...), section(sectionType, []byte{1, 0x5f, 0, 0})...), []string{"unsupported type form 0x5f"}},
		{"unknown import module", withImport(testImport{module: "env", name: "host_secret", kind: importFunc}),
			[]string{`imports function "host_secret" from "env"`, "only wasi_snapshot_preview1"}},
		{"unknown wasi function", withImport(testImport{module: wasiModule, name: "sock_listen", kind: importFunc}),
			[]string{"unknown WASI function wasi_snapshot_preview1.sock_listen"}},
		{"wasi signature", withImport(testImport{module: wasiModule, name: "proc_exit", kind: importFunc, typeIdx: 0}),
			[]string{"imports wasi_snapshot_preview1.proc_exit as () -> (), but it is (i32) -> ()"}},
		{"memory import", testModule{
			types:   []funcType{{}},
			imports: []testImport{{module: "env", name: "memory", kind: importMemory}},
			funcs:   []testFunc{{}}, exports: []testExport{{"_start", 0, 0}},
		}.bytes(), []string{`imports memory "memory" from "env"`}},
		{"global import from wasi", testModule{
			types:   []funcType{{}},
			imports: []testImport{{module: wasiModule, name: "g", kind: importGlobal}},
			funcs:   []testFunc{{}}, exports: []testExport{{"_start", 0, 0}},
		}.bytes(), []string{"provides only functions"}},
		{"no _start", testModule{types: []funcType{{}}, funcs: []testFunc{{}}, exports: []testExport{{"run", 0, 0}}}.bytes(),
			[]string{"no _start export", "not a library or reactor"}},
		{"_start with params", startWithParam, []string{"_start is (i32) -> ()"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := e.Validate(context.Background(), tc.module)
			var merr *ModuleError
			if !errors.As(err, &merr) {
				t.Fatalf("Validate = %v (%T), want *ModuleError", err, err)
			}
			t.Logf("%v", err)
			if merr.Reason != runtime.ReasonInvalidModule {
				t.Errorf("Reason = %q, want %q", merr.Reason, runtime.ReasonInvalidModule)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if merr.Hint == "" {
				t.Errorf("error %q has no hint", err)
			}
		})
	}
}

func TestValidateHonoursContext(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	e := newExecutor(t, Config{
		TransformVersion: "blocking",
		Transform: func(m []byte) ([]byte, error) {
			calls.Add(1)
			<-release // a compilation that takes as long as the test wants
			return m, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.Validate(ctx, trivialModule); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Validate while the compilation is stuck = %v, want context.DeadlineExceeded", err)
	}
	res := e.Run(ctx, runtime.Spec{Module: trivialModule})
	wantReason(t, res, runtime.ReasonCanceled)

	// The compilation went on in the background; a patient caller gets it.
	close(release)
	if err := e.Validate(context.Background(), trivialModule); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("module prepared %d times, want once (shared)", n)
	}
}

func TestDiskCacheIsPopulatedAndReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	mod := writeModule(1, "from the disk cache", false, 0)

	first, err := New(context.Background(), Config{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Validate(context.Background(), mod); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("cache dir mode = %v, want 0700", perm)
	}
	before := cacheFiles(t, dir)
	if len(before) == 0 {
		t.Fatal("compilation cache dir is empty after compiling a module")
	}

	second := newExecutor(t, Config{CacheDir: dir})
	res := second.Run(context.Background(), runtime.Spec{Module: mod})
	if !res.OK() || string(res.Stdout) != "from the disk cache" {
		t.Fatalf("run from disk cache: %s %s %q", res.Reason, res.Message, res.Stdout)
	}
	after := cacheFiles(t, dir)
	if len(after) != len(before) {
		t.Errorf("cache has %d files after the second executor, want %d (reused)", len(after), len(before))
	}
	for path, fi := range before {
		// wazero writes entries by rename: a recompiled entry is a new file.
		if fj, ok := after[path]; !ok || !os.SameFile(fi, fj) {
			t.Errorf("cache entry %s was rewritten; want it read back", path)
		}
	}
}

func TestCacheDirWritableByOthersIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), Config{CacheDir: dir})
	if err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("New with a world-writable cache dir = %v, want an error naming chmod 700", err)
	}
}

func cacheFiles(t *testing.T, dir string) map[string]os.FileInfo {
	t.Helper()
	files := map[string]os.FileInfo{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			files[p] = info
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
