package api

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// LiveOutput reads a running job's output from the worker that runs it
// (this node's or a peer's).
type LiveOutput interface {
	JobOutput(ctx context.Context, node string, r *peerpb.JobOutputRequest) (*peerpb.JobOutputResponse, error)
}

// liveWait is how long one read of a followed job's output waits for new
// bytes on the worker before the job's state is looked at again.
const liveWait = 2 * time.Second

// JobLogs streams a job's output: live from its worker while it runs,
// then the final output's remainder (the final output is authoritative:
// what a live reader missed or the worker had not flushed comes from it).
// A request that resumes a broken stream (its attempt and offsets set)
// starts where the caller's last message ended; every message says where
// its bytes end, for the next resumption.
func (js jobService) JobLogs(ctx context.Context, req *connect.Request[palyrav1.JobLogsRequest], stream *connect.ServerStream[palyrav1.JobLogsResponse]) error {
	s := js.s
	id := req.Msg.Id
	if req.Msg.StdoutOffset < 0 || req.Msg.StderrOffset < 0 {
		return invalid(fmt.Sprintf("negative log offsets (stdout %d, stderr %d)", req.Msg.StdoutOffset, req.Msg.StderrOffset),
			"give the stdout_end and stderr_end of the last message received, or 0 to start at the first byte")
	}
	if _, ok := s.control.State().Job(id); !ok {
		if _, err := s.readInfo(ctx, false); err != nil {
			return err
		}
	}
	if _, err := js.authorizedJob(ctx, policy.ActionJobWatch, id); err != nil {
		return err
	}
	st := s.control.State()
	off := [2]int64{req.Msg.StdoutOffset, req.Msg.StderrOffset}
	attempt := req.Msg.Attempt
	send := func(j *consensus.Job, msg *palyrav1.JobLogsResponse) error {
		msg.Attempt, msg.Phase = j.Attempt, palyrav1.JobPhase(j.Phase)
		msg.StdoutEnd, msg.StderrEnd, msg.Resumable = off[0], off[1], true
		return stream.Send(msg)
	}
	notTaken := 0   // asks in a row of a worker that had not taken the attempt yet
	reread := false // a read without follow looked at the job again after its live read
	for {
		changed := st.Watch(consensus.TopicJob(id))
		j, ok := st.Job(id)
		if !ok {
			return s.notFound(ctx, id)
		}
		if j.Attempt < attempt && req.Msg.Follow {
			// This replica has not yet seen the attempt the caller read
			// (it resumes through another node): wait for it rather than
			// go back to an older attempt. An ended job gets no newer
			// attempt: once this replica is current (a quorum read), an
			// attempt it still lacks never was.
			if j.Phase.Terminal() {
				if _, err := s.readInfo(ctx, false); err != nil {
					return err
				}
				if cur, ok := st.Job(id); ok && cur.Attempt < attempt {
					return invalid(fmt.Sprintf("job %s has no attempt %d (its last is %d)", id, attempt, cur.Attempt),
						"give the attempt of the last message received, or 0 to start at the job's current attempt")
				}
				continue
			}
			if err := waitChange(ctx, changed); err != nil {
				return err
			}
			continue
		}
		if j.Attempt != attempt && (off[0] > 0 || off[1] > 0) {
			// A new attempt's output starts again from its first byte.
			note := fmt.Sprintf("attempt %d ended; attempt %d's output follows", attempt, j.Attempt)
			off = [2]int64{}
			if err := send(&j, &palyrav1.JobLogsResponse{Note: note}); err != nil {
				return err
			}
		}
		attempt = j.Attempt
		if j.Phase.Terminal() {
			if err := s.fillPayloads(&j, true); err != nil {
				return err
			}
			msg := &palyrav1.JobLogsResponse{}
			if int64(len(j.Stdout)) > off[0] {
				msg.Stdout, off[0] = j.Stdout[off[0]:], int64(len(j.Stdout))
			}
			if int64(len(j.Stderr)) > off[1] {
				msg.Stderr, off[1] = j.Stderr[off[1]:], int64(len(j.Stderr))
			}
			return send(&j, msg)
		}
		if j.Phase == consensus.PhaseRunning && s.Live != nil {
			wait := time.Duration(0)
			if req.Msg.Follow {
				wait = liveWait
			}
			readChanged, slack := readLimits(req.Msg.Follow, changed)
			out, err := liveRead(ctx, s.Live, j.NodeID, readChanged, slack, &peerpb.JobOutputRequest{
				JobId: id, StdoutOffset: off[0], StderrOffset: off[1], WaitMs: wait.Milliseconds()})
			if ctx.Err() != nil {
				return fromErr(errCanceled)
			}
			if err == nil && (!out.Found || out.Attempt < j.Attempt) && req.Msg.Follow && notTaken < notTakenAsks {
				// Its worker has not taken this attempt in hand yet (it
				// does a moment after the placement commits, and nothing
				// in the state changes then): ask again shortly, not at
				// the next change or liveWait (a trial: a new attempt's
				// output came 2 s late).
				notTaken++
				if err := waitChangeFor(ctx, changed, notTakenWait); err != nil {
					return err
				}
				continue
			}
			notTaken = 0
			if err == nil && out.Found && out.Attempt == j.Attempt {
				msg := &palyrav1.JobLogsResponse{}
				msg.Stdout, off[0] = past(off[0], out.GetStdout())
				msg.Stderr, off[1] = past(off[1], out.GetStderr())
				if sk := out.GetStdout().GetSkipped() + out.GetStderr().GetSkipped(); sk > 0 {
					msg.Note = fmt.Sprintf("%d bytes of output were dropped before this reader caught up (the final output has them)", sk)
				}
				if len(msg.Stdout) > 0 || len(msg.Stderr) > 0 || msg.Note != "" || !req.Msg.Follow {
					// Without follow, one message even with no output: it
					// carries the job's phase (the CLI says why it is empty).
					if err := send(&j, msg); err != nil {
						return err
					}
				}
				if !req.Msg.Follow {
					return nil
				}
				if !out.Done && (len(msg.Stdout) > 0 || len(msg.Stderr) > 0) {
					continue // more may be waiting
				}
			} else if err != nil {
				s.log.Debug("live output unavailable", "job", id, "worker", j.NodeID, "err", err)
			}
		}
		if !req.Msg.Follow {
			select {
			case <-changed:
				if !reread {
					// The job moved on while its worker was asked (it
					// ended, say): what it holds now is the answer.
					reread = true
					continue
				}
			default:
			}
			return send(&j, &palyrav1.JobLogsResponse{})
		}
		if err := waitChange(ctx, changed); err != nil {
			return err
		}
	}
}

// liveReadSlack is how much longer than the wait it asked for a live
// read may take before it is given up: a worker killed or frozen
// mid-read answers nothing, and QUIC would notice only at its idle
// timeout, holding the follower that long. snapshotReadSlack is the same
// for a read without follow: one answer, which a loaded worker may take
// a while to give.
const (
	liveReadSlack     = 2 * time.Second
	snapshotReadSlack = 10 * time.Second
)

// readLimits is when a live read gives up: a follower's when the job
// changes (it then follows the job's next state) or liveReadSlack past
// its wait; a read without follow only snapshotReadSlack past it, since a
// change to the job (it ended) is handled after the read, and giving up
// at 2 s on a loaded machine sent none of the output (CI once saw that).
func readLimits(follow bool, changed <-chan struct{}) (<-chan struct{}, time.Duration) {
	if follow {
		return changed, liveReadSlack
	}
	return nil, snapshotReadSlack
}

// liveRead asks node for a running job's output (r), and gives up when
// the job changes (changed, if not nil: re-queued off a dead worker,
// ended) or the read outlasts its wait by slack: the caller then looks at the
// job again and follows its next attempt, wherever that runs. A fault
// trial's 'job logs -f' stalled ~9 s after its worker was SIGKILLed.
func liveRead(ctx context.Context, live LiveOutput, node string, changed <-chan struct{}, slack time.Duration, r *peerpb.JobOutputRequest) (*peerpb.JobOutputResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(r.WaitMs)*time.Millisecond+slack)
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return live.JobOutput(ctx, node, r)
}

// past returns the bytes of a live read's chunk c that lie past off, and
// the offset after them. A worker asked for bytes beyond what it holds
// answers from its end, before off: off never goes back, so what the
// caller has is not sent again.
func past(off int64, c *peerpb.OutputChunk) ([]byte, int64) {
	data, end := c.GetData(), c.GetOffset()+int64(len(c.GetData()))
	if end <= off {
		return nil, off
	}
	if n := off - c.GetOffset(); n > 0 {
		data = data[n:]
	}
	return data, end
}

// notTakenWait is how long a follower waits before asking a worker again
// for an attempt it has not taken in hand yet, notTakenAsks how many
// times in a row (a second's worth) before it waits liveWait again.
const (
	notTakenWait = 50 * time.Millisecond
	notTakenAsks = 20
)

// waitChange waits for the followed job to change (changed closed), for
// liveWait at most, or for ctx to end.
func waitChange(ctx context.Context, changed <-chan struct{}) error {
	return waitChangeFor(ctx, changed, liveWait)
}

// waitChangeFor is waitChange for d at most.
func waitChangeFor(ctx context.Context, changed <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		return fromErr(errCanceled)
	}
	return nil
}
