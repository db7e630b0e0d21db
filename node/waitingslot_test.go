package node_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A job its worker holds until a slot is free shows as waiting for one in
// 'job get', and a running one when its run began, as the worker says:
// the cluster records a run's start only with its result, so a placed job
// read as "running" with no start and no word of the wait (a user trial).
func TestJobGetSaysWhetherARunWaitsForASlot(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1, Prefetch: 4})
	op := operator(t, n, n.Addr())
	get := func(id string) *palyrav1.Job { return getJob(t, op, id) }
	first, second := submitSleep(t, op, "3s"), submitSleep(t, op, "3s")
	var a, b *palyrav1.Job
	// The placement commits before the worker takes the job in hand, so
	// wait until the worker has said something of the second job: that it
	// waits, or (wrongly) that it started.
	waitFor(t, "the first job running, the second placed behind it", 30*time.Second, func() bool {
		a, b = get(first), get(second)
		return a.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && b.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING &&
			a.RunStartedAtMs > 0 && (b.WaitingForSlot || b.RunStartedAtMs > 0)
	})
	if a.WaitingForSlot {
		t.Errorf("the running job reads as waiting for a slot: %+v", a)
	}
	if !b.WaitingForSlot || b.RunStartedAtMs != 0 {
		t.Errorf("the job behind it: waiting_for_slot %v, run_started_at_ms %d; want waiting, no start", b.WaitingForSlot, b.RunStartedAtMs)
	}
	if a.RunStartedAtMs < a.PlacedAtMs-1000 || a.RunStartedAtMs > time.Now().UnixMilli()+1000 {
		t.Errorf("run started at %d, placed at %d", a.RunStartedAtMs, a.PlacedAtMs)
	}
	done := waitCompleted(t, op, first)
	if done.WaitingForSlot || done.RunStartedAtMs != 0 {
		t.Errorf("an ended job carries the worker's run status: %+v", done)
	}
	waitFor(t, "the second job to get the slot", 30*time.Second, func() bool {
		b = get(second)
		return b.Phase != palyrav1.JobPhase_JOB_PHASE_RUNNING || b.RunStartedAtMs > 0
	})
	if b.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && b.WaitingForSlot {
		t.Errorf("the second job, started, still reads as waiting: %+v", b)
	}
}

// 'job watch' of a job held on its worker behind another says it waits
// for a slot, then when it starts, then its end (the phase is "running"
// throughout, and the cluster records a start only with the result).
func TestWatchSaysWhenARunWaitsAndStarts(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1, Prefetch: 4})
	op := operator(t, n, n.Addr())
	ids := []string{submitSleep(t, op, "3s"), submitSleep(t, op, "3s")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := op.Jobs.WatchJob(ctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: ids[1]}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	defer stream.Close()
	sawWait, sawStart := false, false
	var last *palyrav1.Job
	for stream.Receive() {
		j := stream.Msg().Job
		last = j
		switch {
		case j.Phase != palyrav1.JobPhase_JOB_PHASE_RUNNING:
		case j.WaitingForSlot:
			if sawStart {
				t.Errorf("a message said the run waits after one said it started: %+v", j)
			}
			sawWait = true
		case j.RunStartedAtMs > 0:
			sawStart = true
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(op.Explain(err))
	}
	if last == nil || last.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		t.Fatalf("the watch ended at %+v, want completed", last)
	}
	if !sawWait || !sawStart {
		t.Errorf("the watch said the run waits: %v, that it started: %v; want both", sawWait, sawStart)
	}
}

// submitSleep submits a job of the sleep module that sleeps for d ("3s").
func submitSleep(t *testing.T, cl *client.Client, d string) string {
	t.Helper()
	resp, err := cl.Jobs.SubmitJob(callCtx(t), connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, "sleep"), Input: []byte(d)}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	return resp.Msg.Job.Id
}
