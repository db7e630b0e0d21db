package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// deadWorker is a worker that was killed or frozen mid-read: it answers
// nothing and nothing closes (QUIC notices only at its idle timeout).
type deadWorker struct{ asked chan struct{} }

func (d deadWorker) JobOutput(ctx context.Context, _ string, _ *peerpb.JobOutputRequest) (*peerpb.JobOutputResponse, error) {
	close(d.asked)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A follower's live read from a worker that stopped answering is given up
// as soon as the job changes (re-queued off the dead worker), so 'job logs
// -f' follows the next attempt at once (a fault trial's stalled ~9 s), and
// at the latest once the read outlasts its wait.
func TestLiveReadGivesUpOnADeadWorker(t *testing.T) {
	changed := make(chan struct{})
	dead := deadWorker{asked: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := liveRead(context.Background(), dead, "n-dead", changed, liveReadSlack, &peerpb.JobOutputRequest{JobId: "j-1", WaitMs: time.Hour.Milliseconds()})
		done <- err
	}()
	<-dead.asked
	close(changed) // the job was re-queued
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the read ended with %v, want it cancelled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the read of a dead worker outlived the job's change")
	}

	// No change: the read ends once its wait and the slack are past.
	dead = deadWorker{asked: make(chan struct{})}
	go func() {
		_, err := liveRead(context.Background(), dead, "n-dead", make(chan struct{}), liveReadSlack, &peerpb.JobOutputRequest{JobId: "j-1", WaitMs: 10})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the read ended with %v, want its deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the read of a dead worker never gave up")
	}
}

// slowWorker answers after delay, as a loaded worker does.
type slowWorker struct{ delay time.Duration }

func (w slowWorker) JobOutput(ctx context.Context, _ string, _ *peerpb.JobOutputRequest) (*peerpb.JobOutputResponse, error) {
	select {
	case <-time.After(w.delay):
		return &peerpb.JobOutputResponse{Found: true, Stdout: &peerpb.OutputChunk{Data: []byte("tick 1\n")}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A read without follow takes the output so far even when the job changes
// meanwhile and its worker answers late; it still gives
// up on a worker that never answers. A follower gives up on either.
func TestSnapshotReadOutlastsAChange(t *testing.T) {
	changed := make(chan struct{})
	close(changed) // the job changed while the read was asked for
	readChanged, slack := readLimits(false, changed)
	out, err := liveRead(context.Background(), slowWorker{delay: liveReadSlack + 500*time.Millisecond}, "n-busy", readChanged, slack,
		&peerpb.JobOutputRequest{JobId: "j-1"})
	if err != nil || string(out.GetStdout().GetData()) != "tick 1\n" {
		t.Fatalf("a read without follow: %v %v, want the output so far", out, err)
	}
	if slack < time.Second || slack > time.Minute {
		t.Fatalf("a read without follow gives up %s past its wait", slack)
	}
	readChanged, slack = readLimits(true, changed)
	if _, err := liveRead(context.Background(), slowWorker{delay: time.Hour}, "n-busy", readChanged, slack,
		&peerpb.JobOutputRequest{JobId: "j-1"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a follower's read after a change: %v, want it given up", err)
	}
}
