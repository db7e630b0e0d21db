package wasm

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/tetratelabs/wazero"
)

// RunCached runs a module named by hash alone once it is compiled, and
// does nothing (ok false) for a module the cache does not hold, so the
// caller knows to fetch the bytes.
func TestRunCached(t *testing.T) {
	e := newExecutor(t, Config{MaxCachedModules: 1})
	var _ runtime.ModuleCache = e
	hello := writeModule(1, "from the cache", false, 0)
	hash := sha(hello)

	for _, h := range []string{hash, "", "nonsense", strings.Repeat("ab", 32)} {
		if res, ok := e.RunCached(context.Background(), runtime.Spec{ModuleHash: h}); ok {
			t.Fatalf("RunCached(%q) on a cold cache ran: %+v", h, res)
		}
	}
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: hello, ModuleHash: hash}), runtime.ReasonNone)
	res, ok := e.RunCached(context.Background(), runtime.Spec{ModuleHash: hash, Input: []byte("x")})
	if !ok {
		t.Fatal("RunCached did not run a module the executor just compiled")
	}
	wantReason(t, res, runtime.ReasonNone)
	if string(res.Stdout) != "from the cache" {
		t.Fatalf("Stdout = %q", res.Stdout)
	}

	// A refused module's verdict is cached too: RunCached reports it.
	bad := append(writeModule(1, "x", false, 0)[:20:20], 0xff)
	wantReason(t, e.Run(context.Background(), runtime.Spec{Module: bad}), runtime.ReasonInvalidModule)
	res, ok = e.RunCached(context.Background(), runtime.Spec{ModuleHash: sha(bad)})
	if !ok {
		t.Fatal("RunCached did not answer for a module whose refusal is cached")
	}
	wantReason(t, res, runtime.ReasonInvalidModule)

	// Evicted (the cache holds one module): not run.
	if _, ok := e.RunCached(context.Background(), runtime.Spec{ModuleHash: hash}); ok {
		t.Fatal("RunCached ran a module evicted from the cache")
	}
}

// A run of a module known only by its hash pins the cache's entry without
// waiting for a compile in progress: it waits for it in its slot, taken in
// order (waiting before the slot, the first runs of a new array raced for
// slots when the compile ended), and needs no bytes.
func TestPinCachedDoesNotWaitForACompile(t *testing.T) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	c := newModuleCache(context.Background(), &wg, 4, func(ctx context.Context, key string, module []byte) (wazero.CompiledModule, moduleLayout, error) {
		<-release
		return nil, moduleLayout{}, &ModuleError{Reason: runtime.ReasonInvalidModule, Message: "refused"}
	})
	done := make(chan error, 1)
	go func() {
		_, err := c.acquire(context.Background(), "k", []byte("m"))
		done <- err
	}()
	for !c.has("k") {
		time.Sleep(time.Millisecond)
	}
	if c.pinCached("nope") != nil {
		t.Fatal("an entry for a key never compiled")
	}
	pinned := make(chan *compiledModule, 1)
	go func() { pinned <- c.pinCached("k") }()
	var e *compiledModule
	select {
	case e = <-pinned:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("pinCached waited for the compile")
	}
	select {
	case <-e.ready:
		t.Fatal("the entry is ready before its compile ended")
	default:
	}
	close(release)
	<-done
	<-e.ready
	if e.err == nil {
		t.Fatal("after the compile: no verdict; want its refusal")
	}
	c.release(e)
	wg.Wait()
}
