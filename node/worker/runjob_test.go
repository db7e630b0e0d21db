package worker

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

// countingBlobs serves modules from memory and counts the reads.
type countingBlobs struct {
	mu   sync.Mutex
	data map[string][]byte
	gets int
}

func (b *countingBlobs) Get(hash string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gets++
	d, ok := b.data[hash]
	if !ok {
		return nil, blob.ErrNotFound
	}
	return d, nil
}

func (b *countingBlobs) Put(data []byte) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := blob.Hash(data)
	b.data[h] = data
	return h, nil
}

// A run whose module the wasm executor has compiled already does not read
// (nor hash) the module from the blob store again; a module the executor
// does not hold is read.
func TestRunJobSkipsBlobReadWhenModuleIsCompiled(t *testing.T) {
	ex, err := wasm.New(context.Background(), wasm.Config{MaxCachedModules: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close(context.Background())
	blobs := &countingBlobs{data: map[string][]byte{}}
	// (module (func (export "_start"))) with a custom section per tag.
	module := func(tag string) []byte {
		m := []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x07\x0a\x01\x06_start\x00\x00\x0a\x04\x01\x02\x00\x0b")
		return append(m, append([]byte{0, byte(1 + len(tag)), byte(len(tag))}, tag...)...)
	}
	a, _ := blobs.Put(module("a"))
	b, _ := blobs.Put(module("b"))
	w := New(Config{NodeID: "n-test", Blobs: blobs, Executors: map[runtime.Kind]runtime.Executor{runtime.KindWasm: ex},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	run := func(hash string, wantGets int) {
		t.Helper()
		res := w.runJob(context.Background(), consensus.Job{ID: "j-" + hash[:6], Kind: "wasm", ModuleHash: hash})
		if !res.OK() {
			t.Fatalf("run of %s failed: %s %s", hash[:6], res.Reason, res.Message)
		}
		if blobs.gets != wantGets {
			t.Fatalf("after a run of %s: %d module reads, want %d", hash[:6], blobs.gets, wantGets)
		}
	}
	run(a, 1) // cold: read and compiled
	run(a, 1) // compiled: no read
	run(a, 1)
	run(b, 2) // another module: read; the cache of one forgets a
	run(a, 3) // a was evicted: read again
	run(a, 3)

	// A module the blob store lost still runs while it is compiled; one
	// neither compiled nor stored fails with the reason.
	delete(blobs.data, a)
	run(a, 3)
	res := w.runJob(context.Background(), consensus.Job{ID: "j-gone", Kind: "wasm", ModuleHash: blob.Hash(module("gone"))})
	if res.Reason != runtime.ReasonInternal || blobs.gets != 4 {
		t.Fatalf("run of a module nobody holds: %s %q after %d reads; want internal after 4", res.Reason, res.Message, blobs.gets)
	}
}
