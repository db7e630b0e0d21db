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
func (js jobService) JobLogs(ctx context.Context, req *connect.Request[palyrav1.JobLogsRequest], stream *connect.ServerStream[palyrav1.JobLogsResponse]) error {
	s := js.s
	id := req.Msg.Id
	if _, ok := s.control.State().Job(id); !ok {
		if _, err := s.readInfo(ctx, false); err != nil {
			return err
		}
	}
	if _, err := js.authorizedJob(ctx, policy.ActionJobWatch, id); err != nil {
		return err
	}
	st := s.control.State()
	var off [2]int64
	var attempt uint32
	for {
		changed := st.Watch(consensus.TopicJob(id))
		j, ok := st.Job(id)
		if !ok {
			return s.notFound(id)
		}
		if j.Attempt != attempt && (off[0] > 0 || off[1] > 0) {
			// A new attempt's output starts again from its first byte.
			note := fmt.Sprintf("attempt %d ended; attempt %d's output follows", attempt, j.Attempt)
			if err := stream.Send(&palyrav1.JobLogsResponse{Note: note, Attempt: j.Attempt, Phase: palyrav1.JobPhase(j.Phase)}); err != nil {
				return err
			}
			off = [2]int64{}
		}
		attempt = j.Attempt
		if j.Phase.Terminal() {
			if err := s.fillPayloads(&j, true); err != nil {
				return err
			}
			msg := &palyrav1.JobLogsResponse{Attempt: j.Attempt, Phase: palyrav1.JobPhase(j.Phase)}
			if int64(len(j.Stdout)) > off[0] {
				msg.Stdout = j.Stdout[off[0]:]
			}
			if int64(len(j.Stderr)) > off[1] {
				msg.Stderr = j.Stderr[off[1]:]
			}
			return stream.Send(msg)
		}
		if j.Phase == consensus.PhaseRunning && s.Live != nil {
			wait := time.Duration(0)
			if req.Msg.Follow {
				wait = liveWait
			}
			out, err := s.Live.JobOutput(ctx, j.NodeID, &peerpb.JobOutputRequest{
				JobId: id, StdoutOffset: off[0], StderrOffset: off[1], WaitMs: wait.Milliseconds()})
			if ctx.Err() != nil {
				return fromErr(errCanceled)
			}
			if err == nil && out.Found && out.Attempt == j.Attempt {
				msg := &palyrav1.JobLogsResponse{Attempt: j.Attempt, Phase: palyrav1.JobPhase(j.Phase),
					Stdout: out.GetStdout().GetData(), Stderr: out.GetStderr().GetData()}
				if sk := out.GetStdout().GetSkipped() + out.GetStderr().GetSkipped(); sk > 0 {
					msg.Note = fmt.Sprintf("%d bytes of output were dropped before this reader caught up (the final output has them)", sk)
				}
				off[0] = out.GetStdout().GetOffset() + int64(len(msg.Stdout))
				off[1] = out.GetStderr().GetOffset() + int64(len(msg.Stderr))
				if len(msg.Stdout) > 0 || len(msg.Stderr) > 0 || msg.Note != "" {
					if err := stream.Send(msg); err != nil {
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
			return stream.Send(&palyrav1.JobLogsResponse{Attempt: j.Attempt, Phase: palyrav1.JobPhase(j.Phase)})
		}
		select {
		case <-changed:
		case <-time.After(liveWait):
		case <-ctx.Done():
			return fromErr(errCanceled)
		}
	}
}
