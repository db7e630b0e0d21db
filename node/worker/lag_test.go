package worker

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime"
)

// laggingReplica is a follower's view that applies nothing by itself: the
// job stays "running here" after the leader committed its result, until
// the test lets the replica catch up.
type laggingReplica struct {
	mu      sync.Mutex
	running []consensus.Job
	wake    chan struct{}
}

func (r *laggingReplica) Watch(string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wake
}

func (r *laggingReplica) RunningOn(string) []consensus.Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]consensus.Job(nil), r.running...)
}

func (r *laggingReplica) Job(id string) (consensus.Job, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.running {
		if j.ID == id {
			return j, true
		}
	}
	return consensus.Job{}, false
}

// poke wakes the worker (as any change on its node would).
func (r *laggingReplica) poke(running []consensus.Job) {
	r.mu.Lock()
	r.running = running
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// leader commits every result it is sent and counts them per job.
type leader struct {
	mu      sync.Mutex
	results map[string]int
}

func (l *leader) Apply(_ context.Context, cmd *raftpb.Command) (consensus.Job, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range cmd.GetFinishBatch().GetResults() {
		l.results[f.Id]++
	}
	return consensus.Job{}, nil
}

func (l *leader) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.results[id]
}

// instant is an executor that echoes its input at once.
type instant struct{}

func (*instant) Kind() runtime.Kind          { return runtime.KindWasm }
func (*instant) Close(context.Context) error { return nil }
func (*instant) Run(_ context.Context, s runtime.Spec) runtime.Result {
	return runtime.Result{Stdout: s.Input}
}

// A worker whose replica has not yet applied a job's committed result
// still sees the job running on itself; being woken then (by another
// placement, say) must not run the job a second time.
func TestNoSecondRunWhileTheReplicaLags(t *testing.T) {
	rep := &laggingReplica{wake: make(chan struct{})}
	ld := &leader{results: map[string]int{}}
	w := New(Config{NodeID: "n1", State: rep, Control: ld, Blobs: &countingBlobs{data: map[string][]byte{}},
		Executors: map[runtime.Kind]runtime.Executor{runtime.KindWasm: &instant{}},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	a := consensus.Job{ID: "a", Kind: "wasm", Attempt: 1, NodeID: "n1", Input: []byte("x")}
	rep.poke([]consensus.Job{a})
	deadline := time.Now().Add(10 * time.Second)
	for ld.count("a") == 0 || w.Running() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the job's result never reached the leader")
		}
		time.Sleep(time.Millisecond)
	}
	// The replica still lags: a is running here at attempt 1. Another
	// placement wakes the worker.
	b := consensus.Job{ID: "b", Kind: "wasm", Attempt: 1, NodeID: "n1", Input: []byte("y")}
	rep.poke([]consensus.Job{a, b})
	for ld.count("b") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("b's result never reached the leader")
		}
		time.Sleep(time.Millisecond)
	}
	if n := ld.count("a"); n != 1 {
		t.Fatalf("job a reported %d times; a lagging replica made the worker run it again", n)
	}
	// Once the replica catches up, a re-placement of a (attempt 2) runs.
	rep.poke(nil)
	a.Attempt = 2
	rep.poke([]consensus.Job{a})
	for ld.count("a") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("a's second attempt never ran")
		}
		time.Sleep(time.Millisecond)
	}
}
