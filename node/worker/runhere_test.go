package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

// RunHere runs a job at once when its module is compiled and a slot is
// free, and gives up (nothing to record) otherwise: a module not compiled
// here, every slot taken, a run past RunHereLimit (its module is then not
// tried here again).
func TestRunHere(t *testing.T) {
	ex, err := wasm.New(context.Background(), wasm.Config{MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close(context.Background())
	blobs := &countingBlobs{data: map[string][]byte{}}
	rev, _ := blobs.Put(testwasm.Build(t, "reverse"))
	sleep, _ := blobs.Put(testwasm.Build(t, "sleep"))
	// A generous limit for the runs that must complete here (a loaded -race
	// run of the Go module can take over the default 50 ms); the limit's
	// own case below lowers it.
	w := New(Config{NodeID: "n-here", Blobs: blobs, Executors: map[runtime.Kind]runtime.Executor{runtime.KindWasm: ex},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RunHereLimit: 10 * time.Second})
	job := func(id, hash, input string) consensus.Job {
		return consensus.Job{ID: id, Kind: "wasm", ModuleHash: hash, Input: []byte(input), TimeoutMS: 30_000, Attempt: 1}
	}
	ctx := context.Background()

	if _, ok := w.RunHere(ctx, job("cold", rev, "abc")); ok {
		t.Fatal("ran a module that is not compiled here")
	}
	for _, h := range []string{rev, sleep} { // compile both, the way a placement would
		if res := w.runJob(ctx, job("warm", h, "1ms")); !res.OK() {
			t.Fatalf("warm-up: %s %s", res.Reason, res.Message)
		}
	}
	fin, ok := w.RunHere(ctx, job("j-1", rev, "abc"))
	if !ok || !fin.Ok || string(fin.Stdout) != "cba" || fin.Id != "j-1" || fin.Attempt != 1 || fin.NodeId != "n-here" || fin.AtMs == 0 {
		t.Fatalf("run here: %v %v", fin, ok)
	}

	// The only slot is taken: nothing runs, nothing waits.
	done := make(chan struct{})
	go func() { defer close(done); w.runJob(ctx, job("busy", sleep, "300ms")) }()
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	if _, ok := w.RunHere(ctx, job("j-2", rev, "x")); ok || time.Since(t0) > 150*time.Millisecond { // waiting would be the busy run's 200 ms more
		t.Fatalf("ran (%v) or waited %v with no free slot", ok, time.Since(t0))
	}
	<-done

	// A job whose own timeout is within the limit ends by it: the timeout
	// is the job's outcome, recorded.
	short := job("j-5", sleep, "1s")
	short.TimeoutMS = 20
	if fin, ok := w.RunHere(ctx, short); !ok || fin.Ok || fin.GetError().GetCode() != "timeout" {
		t.Fatalf("a job timing out by its own 20 ms timeout: %v %v; want its timeout recorded", fin, ok)
	}

	// A run past the limit stops there, and its module goes the usual way
	// for a while.
	w.cfg.RunHereLimit = 200 * time.Millisecond
	t0 = time.Now()
	if _, ok := w.RunHere(ctx, job("j-3", sleep, "2s")); ok || time.Since(t0) > 1500*time.Millisecond {
		t.Fatalf("a 2 s job run here: ok %v after %v", ok, time.Since(t0))
	}
	if _, ok := w.RunHere(ctx, job("j-4", sleep, "1ms")); ok {
		t.Fatal("a module that ran too long here was tried again at once")
	}
}
