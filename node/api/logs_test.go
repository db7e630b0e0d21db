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
		_, err := liveRead(context.Background(), dead, "n-dead", changed, &peerpb.JobOutputRequest{JobId: "j-1", WaitMs: time.Hour.Milliseconds()})
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
		_, err := liveRead(context.Background(), dead, "n-dead", make(chan struct{}), &peerpb.JobOutputRequest{JobId: "j-1", WaitMs: 10})
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
