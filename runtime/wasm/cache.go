package wasm

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/tetratelabs/wazero"
)

// compiledModule is a cache entry: a module compiled once and shared by
// every run of the same bytes, or the reason it was refused.
type compiledModule struct {
	key   string
	ready chan struct{} // closed when the fields below are set

	module wazero.CompiledModule
	layout moduleLayout
	err    error // *ModuleError (cached) or an internal failure (not cached)

	refs    int // runs holding module; guarded by moduleCache.mu
	evicted bool
	elem    *list.Element
}

// moduleCache is a bounded LRU of compiled modules keyed by module hash and
// transform version. Concurrent requests for one key share one compilation;
// a compilation continues in the background when its requester gives up, so
// the next request finds it done. Entries are reference-counted so eviction
// never closes a module a run is about to instantiate.
type moduleCache struct {
	max     int
	compile func(ctx context.Context, key string, module []byte) (wazero.CompiledModule, moduleLayout, error)
	bg      context.Context // lifetime of background compilations
	wg      *sync.WaitGroup // tracks background compilations

	mu      sync.Mutex
	entries map[string]*compiledModule
	lru     *list.List // front = most recently used
}

func newModuleCache(bg context.Context, wg *sync.WaitGroup, max int,
	compile func(ctx context.Context, key string, module []byte) (wazero.CompiledModule, moduleLayout, error)) *moduleCache {
	return &moduleCache{max: max, compile: compile, bg: bg, wg: wg,
		entries: map[string]*compiledModule{}, lru: list.New()}
}

// acquire returns the compiled module for key, compiling module (whose
// cache key is key) if needed. The caller must release a non-nil result. It
// honours ctx while waiting.
func (c *moduleCache) acquire(ctx context.Context, key string, module []byte) (*compiledModule, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok {
		c.lru.MoveToFront(e.elem)
	} else {
		e = &compiledModule{key: key, ready: make(chan struct{})}
		e.elem = c.lru.PushFront(e)
		c.entries[key] = e
		c.wg.Add(1)
		go c.build(e, bytes.Clone(module)) // the caller may reuse its slice
		c.evictLocked()
	}
	e.refs++
	c.mu.Unlock()
	return c.wait(ctx, e)
}

// pinCached is acquire for a module known only by its key, without
// waiting: it returns key's entry pinned (release it), compiled, refused
// or still compiling, or nil when the cache holds none. A run waits for
// a compile in progress in its slot, taken in Spec.Order: waiting for it
// before the slot, the first runs of a new array raced for slots in no
// order when the compile ended (and reading the module's bytes instead,
// each run held a copy while it waited).
func (c *moduleCache) pinCached(key string) *compiledModule {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(e.elem)
	e.refs++
	return e
}

// has reports whether key has an entry: compiled, being compiled, or
// refused.
func (c *moduleCache) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[key]
	return ok
}

// wait waits for e's compilation, holding the reference acquire took; it
// drops it unless it returns e.
func (c *moduleCache) wait(ctx context.Context, e *compiledModule) (*compiledModule, error) {
	select {
	case <-e.ready:
	case <-ctx.Done():
		c.release(e)
		return nil, context.Cause(ctx)
	}
	if e.err != nil {
		c.release(e)
		return nil, e.err
	}
	return e, nil
}

// build compiles e in the background and publishes the result.
func (c *moduleCache) build(e *compiledModule, module []byte) {
	defer c.wg.Done()
	var (
		mod    wazero.CompiledModule
		layout moduleLayout
		err    error
	)
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("compiler panicked: %v", r)
			}
		}()
		mod, layout, err = c.compile(c.bg, e.key, module)
	}()

	c.mu.Lock()
	defer c.mu.Unlock()
	e.module, e.layout, e.err = mod, layout, err
	close(e.ready)
	if _, isModuleErr := err.(*ModuleError); err != nil && !isModuleErr {
		// Internal failures are not a property of the module: forget them.
		c.removeLocked(e)
	}
	c.closeIfUnusedLocked(e)
}

// release drops a reference taken by acquire.
func (c *moduleCache) release(e *compiledModule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	c.closeIfUnusedLocked(e)
}

func (c *moduleCache) evictLocked() {
	for c.lru.Len() > c.max {
		c.removeLocked(c.lru.Back().Value.(*compiledModule))
	}
}

func (c *moduleCache) removeLocked(e *compiledModule) {
	if e.evicted {
		return
	}
	e.evicted = true
	c.lru.Remove(e.elem)
	if c.entries[e.key] == e {
		delete(c.entries, e.key)
	}
	c.closeIfUnusedLocked(e)
}

// closeIfUnusedLocked frees an evicted entry's native code once no run holds
// it and its compilation has finished.
func (c *moduleCache) closeIfUnusedLocked(e *compiledModule) {
	if !e.evicted || e.refs > 0 || e.module == nil {
		return
	}
	select {
	case <-e.ready:
	default:
		return
	}
	_ = e.module.Close(context.Background())
	e.module = nil
}

// len reports how many modules are cached (for tests and metrics).
func (c *moduleCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
