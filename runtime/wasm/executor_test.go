package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime"
)

// sharedCacheDir is a compilation cache shared by the package's tests, and
// by later runs: a cold Go guest takes ~10 s to compile under -race, so
// each is compiled once per machine, not once per Executor. wazero keys its
// entries by module hash and its own version, and writes them atomically.
var sharedCacheDir = filepath.Join(os.TempDir(), "palyra-wasm-test-compile-cache")

// newExecutor returns an Executor closed at the end of the test. Unless cfg
// names a CacheDir it uses the package's shared compilation cache.
func newExecutor(t testing.TB, cfg Config) *Executor {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = sharedCacheDir
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// wantReason fails the test unless res ended for reason with a message
// containing each of parts.
func wantReason(t *testing.T, res runtime.Result, reason runtime.Reason, parts ...string) {
	t.Helper()
	t.Logf("reason %q, message %q, hint %q", res.Reason, res.Message, res.Hint)
	if res.Reason != reason {
		t.Fatalf("reason = %q (%s), want %q; stderr: %s", res.Reason, res.Message, reason, clip(string(res.Stderr)))
	}
	for _, p := range parts {
		if !strings.Contains(res.Message, p) {
			t.Errorf("message %q does not contain %q", res.Message, p)
		}
	}
	if strings.Contains(res.Message, "\n") {
		t.Errorf("message %q spans several lines", res.Message)
	}
}

func TestWithoutCacheDir(t *testing.T) {
	e, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	res := e.Run(context.Background(), runtime.Spec{Module: writeModule(1, "in memory", false, 0)})
	wantReason(t, res, runtime.ReasonNone)
	if string(res.Stdout) != "in memory" {
		t.Errorf("Stdout = %q", res.Stdout)
	}
}

func TestReverse(t *testing.T) {
	e := newExecutor(t, Config{})
	if k := e.Kind(); k != runtime.KindWasm {
		t.Errorf("Kind = %q, want %q", k, runtime.KindWasm)
	}
	mod := testwasm.Build(t, "reverse")
	for in, want := range map[string]string{"hello": "olleh", "héllo, 世界": "界世 ,olléh", "": ""} {
		res := e.Run(context.Background(), runtime.Spec{Module: mod, Input: []byte(in)})
		if !res.OK() {
			t.Fatalf("reverse %q: %s: %s", in, res.Reason, res.Message)
		}
		if got := string(res.Stdout); got != want {
			t.Errorf("reverse %q = %q, want %q", in, got, want)
		}
		if res.Duration <= 0 {
			t.Errorf("Duration = %v, want > 0", res.Duration)
		}
	}
}

func TestTimeoutStopsCallFreeLoop(t *testing.T) {
	e := newExecutor(t, Config{})
	spin := testwasm.Build(t, "spin")
	res := e.Run(context.Background(), runtime.Spec{Module: spin, Timeout: 300 * time.Millisecond})
	wantReason(t, res, runtime.ReasonTimeout, "timed out after 300ms")

	// A hand-built loop with no calls at all, not even in a runtime.
	res = e.Run(context.Background(), runtime.Spec{Module: loopModule, Timeout: 100 * time.Millisecond})
	wantReason(t, res, runtime.ReasonTimeout, "timed out after 100ms")

	// The executor is still healthy.
	res = e.Run(context.Background(), runtime.Spec{Module: testwasm.Build(t, "reverse"), Input: []byte("ok")})
	if !res.OK() || string(res.Stdout) != "ko" {
		t.Fatalf("run after timeout: %s %s %q", res.Reason, res.Message, res.Stdout)
	}
}

func TestTimeoutInterruptsSleep(t *testing.T) {
	e := newExecutor(t, Config{})
	// A short sleep really sleeps and completes.
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: sleepModule(uint64(time.Millisecond))}), runtime.ReasonNone)
	// An hour-long sleep inside a host call still ends at the timeout...
	res := e.Run(context.Background(), runtime.Spec{Module: sleepModule(uint64(time.Hour)), Timeout: 100 * time.Millisecond})
	wantReason(t, res, runtime.ReasonTimeout, "timed out after 100ms")
	// ...and on cancellation.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	wantReason(t, e.Run(ctx, runtime.Spec{Module: sleepModule(uint64(time.Hour))}), runtime.ReasonCanceled)
}

func TestSleepExample(t *testing.T) {
	e := newExecutor(t, Config{})
	sleep := testwasm.Build(t, "sleep")
	res := e.Run(context.Background(), runtime.Spec{Module: sleep, Input: []byte("50ms")})
	wantReason(t, res, runtime.ReasonNone)
	if string(res.Stdout) != "slept 50ms" {
		t.Errorf("Stdout = %q, want %q", res.Stdout, "slept 50ms")
	}
	res = e.Run(context.Background(), runtime.Spec{Module: sleep, Input: []byte("1h"), Timeout: 200 * time.Millisecond})
	wantReason(t, res, runtime.ReasonTimeout)
}

func TestCallerCancelIsNotTimeout(t *testing.T) {
	e := newExecutor(t, Config{})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := e.Run(ctx, runtime.Spec{Module: trivialModule})
	wantReason(t, res, runtime.ReasonCanceled)

	// Cancel while the guest runs, long before its own timeout. The
	// parent's deadline is earlier than the job's timeout on purpose: a
	// caller's deadline is a cancellation, not the job's timeout.
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	res = e.Run(ctx, runtime.Spec{Module: loopModule, Timeout: time.Hour})
	wantReason(t, res, runtime.ReasonCanceled)
}

func TestMembombHitsMemoryLimit(t *testing.T) {
	e := newExecutor(t, Config{})
	res := e.Run(context.Background(), runtime.Spec{Module: testwasm.Build(t, "membomb"), MemoryLimit: 16 << 20})
	wantReason(t, res, runtime.ReasonMemoryLimit, "memory limit 16 MiB reached")
}

func TestMemoryLimitHandBuilt(t *testing.T) {
	e := newExecutor(t, Config{})
	ctx := context.Background()

	// 1 + 320 pages = 20.06 MiB > 16 MiB: refused, and the guest traps.
	res := e.Run(ctx, runtime.Spec{Module: growModule(320, true), MemoryLimit: 16 << 20})
	wantReason(t, res, runtime.ReasonMemoryLimit, "memory limit 16 MiB reached (guest tried to grow to 20.1 MiB)")

	// Within the limit the same growth succeeds.
	res = e.Run(ctx, runtime.Spec{Module: growModule(320, true), MemoryLimit: 32 << 20})
	wantReason(t, res, runtime.ReasonNone)

	// A guest that handles the refused growth and exits normally succeeds.
	res = e.Run(ctx, runtime.Spec{Module: growModule(320, false), MemoryLimit: 16 << 20})
	wantReason(t, res, runtime.ReasonNone)

	// Initial memory above the limit is refused before instantiation.
	big := testModule{
		types: []funcType{{}}, funcs: []testFunc{{}}, memory: []uint32{512},
		exports: []testExport{{"_start", 0, 0}},
	}.bytes()
	res = e.Run(ctx, runtime.Spec{Module: big, MemoryLimit: 16 << 20})
	wantReason(t, res, runtime.ReasonMemoryLimit, "initial memory 32 MiB exceeds the memory limit 16 MiB")
}

func TestOutputLimit(t *testing.T) {
	e := newExecutor(t, Config{})
	const limit = 64 << 10

	// This guest ignores failed writes and writes forever: only the
	// executor can stop it.
	flood := writeModule(1, strings.Repeat("flood ", 1000), true, 0)
	res := e.Run(context.Background(), runtime.Spec{Module: flood, MaxOutput: limit})
	wantReason(t, res, runtime.ReasonOutputLimit, "stdout exceeded 64 KiB")
	if len(res.Stdout) != limit {
		t.Errorf("captured %d bytes of stdout, want exactly %d", len(res.Stdout), limit)
	}
	res = e.Run(context.Background(), runtime.Spec{Module: writeModule(2, "err", true, 0), MaxOutput: limit})
	wantReason(t, res, runtime.ReasonOutputLimit, "stderr exceeded 64 KiB")

	// A Go guest making one write bigger than the bound, then exiting 0.
	reverse := testwasm.Build(t, "reverse")
	in := strings.Repeat("x", limit+1)
	res = e.Run(context.Background(), runtime.Spec{Module: reverse, Input: []byte(in), MaxOutput: limit})
	wantReason(t, res, runtime.ReasonOutputLimit)

	// Exactly the bound is fine.
	res = e.Run(context.Background(), runtime.Spec{Module: reverse, Input: []byte(in[1:]), MaxOutput: limit})
	wantReason(t, res, runtime.ReasonNone)
}

func TestExitCode(t *testing.T) {
	e := newExecutor(t, Config{})
	res := e.Run(context.Background(), runtime.Spec{Module: testwasm.Build(t, "fail")})
	wantReason(t, res, runtime.ReasonExitCode, "exited with code 3: fail: something went wrong on purpose")
	if res.ExitCode != 3 {
		t.Errorf("ExitCode = %d, want 3", res.ExitCode)
	}
	if !strings.Contains(string(res.Stderr), "on purpose") {
		t.Errorf("Stderr = %q", res.Stderr)
	}

	res = e.Run(context.Background(), runtime.Spec{Module: writeModule(2, "first\nlast words\n\n", false, 42)})
	wantReason(t, res, runtime.ReasonExitCode, "exited with code 42: last words")

	res = e.Run(context.Background(), runtime.Spec{Module: procExitModule(7)})
	wantReason(t, res, runtime.ReasonExitCode, "exited with code 7 (stderr is empty)")
	if res.ExitCode != 7 {
		t.Errorf("ExitCode = %d, want 7", res.ExitCode)
	}

	res = e.Run(context.Background(), runtime.Spec{Module: procExitModule(0)})
	wantReason(t, res, runtime.ReasonNone)
}

func TestTraps(t *testing.T) {
	e := newExecutor(t, Config{})
	for _, tc := range []struct {
		name   string
		module []byte
		want   string
	}{
		{"unreachable", unreachableModule, "guest trapped: unreachable"},
		{"out of bounds", outOfBoundsModule, "guest trapped: out of bounds memory access"},
		{"deep recursion", recursionModule, "guest trapped: stack overflow (recursion too deep)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.Run(context.Background(), runtime.Spec{Module: tc.module})
			wantReason(t, res, runtime.ReasonTrap, tc.want)
		})
	}
}

func TestRunRefusesInvalidModule(t *testing.T) {
	e := newExecutor(t, Config{})
	res := e.Run(context.Background(), runtime.Spec{Module: []byte("#!/bin/sh\necho hi\n")})
	wantReason(t, res, runtime.ReasonInvalidModule, "not a WebAssembly module (bad magic)")
	if !strings.Contains(res.Hint, "GOOS=wasip1") || strings.Contains(res.Message, "GOOS=wasip1") {
		t.Errorf("bad magic: message %q, hint %q: want what to do in the hint alone", res.Message, res.Hint)
	}

	noStart := testModule{types: []funcType{{}}, funcs: []testFunc{{}}, exports: []testExport{{"main", 0, 0}}}.bytes()
	res = e.Run(context.Background(), runtime.Spec{Module: noStart})
	wantReason(t, res, runtime.ReasonInvalidModule, "no _start export")
}

func TestConcurrentRuns(t *testing.T) {
	e := newExecutor(t, Config{MaxConcurrent: 2})
	mod := testwasm.Build(t, "reverse")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			in := fmt.Sprintf("job-%d", i)
			res := e.Run(context.Background(), runtime.Spec{Module: mod, Input: []byte(in)})
			if want := reverseString(in); !res.OK() || string(res.Stdout) != want {
				errs <- fmt.Errorf("run %d: %s %s %q, want %q", i, res.Reason, res.Message, res.Stdout, want)
			}
		})
	}
	// A loop occupying a slot must not block the others for good.
	wg.Go(func() {
		res := e.Run(context.Background(), runtime.Spec{Module: loopModule, Timeout: 200 * time.Millisecond})
		if res.Reason != runtime.ReasonTimeout {
			errs <- fmt.Errorf("loop: %s %s", res.Reason, res.Message)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestWaitForSlotHonoursContext(t *testing.T) {
	e := newExecutor(t, Config{MaxConcurrent: 1})
	busyCtx, stopBusy := context.WithCancel(context.Background())
	defer stopBusy()
	busy := make(chan runtime.Result)
	go func() {
		busy <- e.Run(busyCtx, runtime.Spec{Module: loopModule, Timeout: time.Hour})
	}()
	// Wait until the loop holds the only slot.
	waitFor(t, func() bool { return e.slots.inUse() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res := e.Run(ctx, runtime.Spec{Module: trivialModule})
	wantReason(t, res, runtime.ReasonCanceled, "waiting for a free slot")
	stopBusy()
	wantReason(t, <-busy, runtime.ReasonCanceled)
}

func TestCloseStopsRunsAndRefusesNew(t *testing.T) {
	e, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	busy := make(chan runtime.Result)
	go func() {
		busy <- e.Run(context.Background(), runtime.Spec{Module: loopModule, Timeout: time.Hour})
	}()
	waitFor(t, func() bool { return e.slots.inUse() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := e.Close(ctx); err == nil || !strings.Contains(err.Error(), "still active") {
		t.Errorf("Close with a stuck run = %v, want a 'still active' error", err)
	}
	wantReason(t, <-busy, runtime.ReasonInternal, "shut down")
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: trivialModule}), runtime.ReasonInternal, "shut down")
	if err := e.Validate(context.Background(), trivialModule); !errors.Is(err, ErrClosed) {
		t.Errorf("Validate after Close = %v, want ErrClosed", err)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestModuleHash(t *testing.T) {
	e := newExecutor(t, Config{})
	wrong := strings.Repeat("ab", 32)
	res := e.Run(context.Background(), runtime.Spec{Module: trivialModule, ModuleHash: wrong})
	wantReason(t, res, runtime.ReasonInternal, "hash mismatch")
	// The mismatch was not cached against the claimed hash.
	res = e.Run(context.Background(), runtime.Spec{Module: trivialModule, ModuleHash: sha(trivialModule)})
	wantReason(t, res, runtime.ReasonNone)
	// A malformed hash is ignored and recomputed.
	res = e.Run(context.Background(), runtime.Spec{Module: trivialModule, ModuleHash: "nonsense"})
	wantReason(t, res, runtime.ReasonNone)
}

func TestCacheEvictionKeepsWorking(t *testing.T) {
	e := newExecutor(t, Config{MaxCachedModules: 1})
	for range 3 {
		for _, m := range [][]byte{trivialModule, procExitModule(0), growModule(1, true)} {
			wantReason(t, e.Run(context.Background(), runtime.Spec{Module: m}), runtime.ReasonNone)
		}
	}
	if n := e.modules.len(); n != 1 {
		t.Errorf("cache holds %d modules, want 1", n)
	}
}

func TestTransformSeam(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	e := newExecutor(t, Config{
		TransformVersion: "test-1",
		Transform: func(m []byte) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if bytes.Equal(m, refusedByTransform) {
				return nil, fmt.Errorf("cannot meter this")
			}
			return unreachableModule, nil // proves the transformed module is what runs
		},
	})
	for range 2 {
		wantReason(t, e.Run(context.Background(), runtime.Spec{Module: trivialModule}), runtime.ReasonTrap, "unreachable")
	}
	if calls != 1 {
		t.Errorf("Transform ran %d times for one module, want 1 (cached)", calls)
	}
	res := e.Run(context.Background(), runtime.Spec{Module: refusedByTransform})
	wantReason(t, res, runtime.ReasonInvalidModule, "preparing module: cannot meter this")
}

var refusedByTransform = procExitModule(9)

func TestTableGrowthIsCapped(t *testing.T) {
	e := newExecutor(t, Config{})
	// Growth within the cap works even though the table declares no max.
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: tableGrowModule(1000)}), runtime.ReasonNone)
	// Past the cap table.grow returns -1 (and this guest then traps)
	// instead of the worker allocating gigabytes.
	res := e.Run(context.Background(), runtime.Spec{Module: tableGrowModule(1 << 22)})
	wantReason(t, res, runtime.ReasonTrap, "unreachable")
}

func reverseString(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached before the deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Result.Ran is the run itself, a wait for a free slot excluded;
// Duration is the whole call.
func TestRanExcludesTheWaitForASlot(t *testing.T) {
	e := newExecutor(t, Config{MaxConcurrent: 1})
	busyCtx, stopBusy := context.WithCancel(context.Background())
	busy := make(chan runtime.Result)
	go func() {
		busy <- e.Run(busyCtx, runtime.Spec{Module: loopModule, Timeout: time.Hour})
	}()
	waitFor(t, func() bool { return e.slots.inUse() == 1 })
	waited := make(chan runtime.Result)
	began := make(chan time.Time, 1)
	go func() {
		began <- time.Now()
		waited <- e.Run(context.Background(), runtime.Spec{Module: sleepModule(uint64(50 * time.Millisecond))})
	}()
	start := <-began
	time.Sleep(400 * time.Millisecond) // the second run waits for the slot
	released := time.Now()
	stopBusy()
	<-busy
	res := <-waited
	since := time.Since(released)
	wantReason(t, res, runtime.ReasonNone)
	// The run cannot have had the slot before it was released, so a Ran
	// without the wait fits in the time since; one with it would also hold
	// the 400ms before (by any machine's speed, once Run began before the
	// release: a run that began after has no wait to tell apart).
	if res.Ran < 50*time.Millisecond || res.Ran > since || res.Duration < res.Ran {
		t.Fatalf("Duration %s, Ran %s, %s since the slot's release (the run began %s before it): want 50ms ≤ Ran ≤ the time since the release",
			res.Duration, res.Ran, since, released.Sub(start))
	}
}

// Every limit a run hits says what happened in its message and what to do
// in its hint, the same way for each (the fix for a timeout or a memory
// limit was inside the message, and the hint empty, while out_of_fuel had
// it in the hint): a client shows them apart.
func TestLimitFailuresPutTheFixInTheHint(t *testing.T) {
	e := newExecutor(t, Config{})
	small := newExecutor(t, Config{DefaultFuel: 1_000_000})
	ctx := context.Background()
	big := testModule{
		types: []funcType{{}}, funcs: []testFunc{{}}, memory: []uint32{512},
		exports: []testExport{{"_start", 0, 0}},
	}.bytes()
	for _, tc := range []struct {
		name   string
		res    runtime.Result
		reason runtime.Reason
		hint   []string
	}{
		{"timeout", e.Run(ctx, runtime.Spec{Module: loopModule, Timeout: 100 * time.Millisecond}), runtime.ReasonTimeout, []string{"--timeout"}},
		{"memory", e.Run(ctx, runtime.Spec{Module: growModule(320, true), MemoryLimit: 16 << 20}), runtime.ReasonMemoryLimit, []string{"--memory"}},
		{"initial memory", e.Run(ctx, runtime.Spec{Module: big, MemoryLimit: 16 << 20}), runtime.ReasonMemoryLimit, []string{"--memory", "32 MiB"}},
		{"stdout", e.Run(ctx, runtime.Spec{Module: writeModule(1, "out", true, 0), MaxOutput: 4096}), runtime.ReasonOutputLimit, []string{"--max-output"}},
		{"stderr", e.Run(ctx, runtime.Spec{Module: writeModule(2, "err", true, 0), MaxOutput: 4096}), runtime.ReasonOutputLimit, []string{"--max-output"}},
		{"fuel given", e.Run(ctx, runtime.Spec{Module: loopModule, Fuel: 5_000_000, Timeout: time.Hour}), runtime.ReasonOutOfFuel,
			[]string{"--fuel 50000000 ", "--fuel 0 is the default, 10,000,000,000 units, not an unlimited"}},
		{"default fuel", small.Run(ctx, runtime.Spec{Module: loopModule, Timeout: time.Hour}), runtime.ReasonOutOfFuel,
			[]string{"--fuel 10000000 ", "without --fuel, or with --fuel 0, gets the default of 1,000,000 units", "no budget is unlimited"}},
	} {
		if tc.res.Reason != tc.reason {
			t.Errorf("%s: reason %q (%s), want %q", tc.name, tc.res.Reason, tc.res.Message, tc.reason)
			continue
		}
		if tc.res.Message == "" || strings.Contains(tc.res.Message, "--") || strings.Contains(tc.res.Message, "raise") {
			t.Errorf("%s: message %q: want what happened, without the fix", tc.name, tc.res.Message)
		}
		for _, p := range tc.hint {
			if !strings.Contains(tc.res.Hint, p) {
				t.Errorf("%s: hint %q does not contain %q", tc.name, tc.res.Hint, p)
			}
		}
	}
}
