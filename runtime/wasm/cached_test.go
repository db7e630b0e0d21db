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

// A module still compiling is not "cached" to RunCached: a run waiting for
// that compile before taking its place for a slot would race the others
// for one when it ended (the first runs of a new array started out of
// order); the caller runs with the module's bytes instead and waits for
// the compile in its slot, taken in order.
func TestAcquireCachedDoesNotWaitForACompile(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cm, err := c.acquireCached(ctx, "k")
	close(release)
	if cm != nil || err != nil {
		t.Fatalf("while compiling: %v, %v; want nil, nil at once (not cached yet)", cm, err)
	}
	<-done
	if _, err := c.acquireCached(context.Background(), "k"); err == nil {
		t.Fatal("after the compile: no verdict; want its refusal")
	}
	wg.Wait()
}
