package api

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A watcher gets the current state at once and the job's end at once; an
// update in between waits for the hold-off, so a job that ends within it
// is sent once, ended, and one that stays running is still reported.
func TestWatchHoldsUpdatesThatTheEndOvertakes(t *testing.T) {
	js, _, _, ctl, _ := newSubmitServer(t)
	apply := func(cmd *raftpb.Command) {
		t.Helper()
		if _, err := ctl.Apply(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(id string) {
		apply(&raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: &raftpb.JobRecord{Id: id, Kind: "wasm", ModuleSha256: "m"}}}})
	}
	assign := func(id string) {
		apply(&raftpb.Command{Cmd: &raftpb.Command_AssignJob{AssignJob: &raftpb.AssignJob{Id: id, Attempt: 1, NodeId: "n1", AtMs: 1}}})
	}
	finish := func(id string) {
		apply(&raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: id, Attempt: 1, NodeId: "n1", Ok: true, AtMs: 2}}})
	}
	type watch struct {
		mu     sync.Mutex
		phases []consensus.Phase
		done   chan error
	}
	follow := func(id string) *watch {
		w := &watch{done: make(chan error, 1)}
		go func() {
			w.done <- js.followWith(context.Background(), id, nil, func(m *palyrav1.WatchJobResponse) error {
				w.mu.Lock()
				w.phases = append(w.phases, consensus.Phase(m.Job.Phase))
				w.mu.Unlock()
				return nil
			})
		}()
		return w
	}
	seen := func(w *watch) []consensus.Phase {
		w.mu.Lock()
		defer w.mu.Unlock()
		return append([]consensus.Phase(nil), w.phases...)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	// Overtaken: with a long hold-off, running then completed is sent as
	// completed only, and at once.
	js.s.updateHoldoff = time.Hour
	submit("short")
	w := follow("short")
	waitFor("the first message", func() bool { return len(seen(w)) == 1 })
	assign("short")
	time.Sleep(100 * time.Millisecond) // the watcher sees running (and holds it)
	finish("short")
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
	if got := seen(w); len(got) != 2 || got[0] != consensus.PhaseQueued || got[1] != consensus.PhaseCompleted {
		t.Fatalf("short job: watcher saw %v, want [queued completed]", got)
	}

	// Not overtaken: running is reported once the hold-off is up.
	js.s.updateHoldoff = 20 * time.Millisecond
	submit("long")
	w = follow("long")
	waitFor("the first message", func() bool { return len(seen(w)) == 1 })
	assign("long")
	waitFor("running to be reported", func() bool { return len(seen(w)) == 2 })
	finish("long")
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
	if got := seen(w); len(got) != 3 || got[1] != consensus.PhaseRunning || got[2] != consensus.PhaseCompleted {
		t.Fatalf("long job: watcher saw %v, want [queued running completed]", got)
	}
}
