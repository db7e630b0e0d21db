package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// maxArrayEntryBytes bounds the one Raft entry that accepts an array. It
// stays well under the 64 MiB peer frame that carries a command forwarded
// from a follower to the leader, and keeps a single entry from stalling
// replication. Inline inputs count their bytes; a blob input costs its
// hash and size.
const maxArrayEntryBytes = 48 << 20

// arrayWatchInterval coalesces an array's progress: WatchJob sends at most
// one update per interval, however many tasks change within it.
const arrayWatchInterval = 100 * time.Millisecond

// validateArray checks an array submission's inputs before anything is
// stored: every refusal names the limit and the way around it.
func validateArray(m *palyrav1.SubmitJobRequest) error {
	switch {
	case len(m.BrowserScript) > 0:
		return invalid("job arrays run wasm modules; a browser script takes no input", "submit browser jobs one at a time")
	case len(m.Input) > 0:
		return invalid("give either one input or several inputs (an array), not both", "drop --input, or add it as one more line of --inputs")
	case len(m.Inputs) > consensus.MaxArrayTasks:
		return invalid(fmt.Sprintf("an array of %d tasks is over the limit of %d", len(m.Inputs), consensus.MaxArrayTasks),
			"split the work into several arrays")
	}
	total, entry := 0, 0
	for i, in := range m.Inputs {
		if len(in) > MaxInputBytes {
			return invalid(fmt.Sprintf("the input of task %d (counting from 0) is %s; the limit is %s per task", i, mib(len(in)), mib(MaxInputBytes)),
				"pass less input per task, or have the task fetch its data")
		}
		total += len(in)
		entry += taskEntryBytes(len(in))
	}
	switch {
	case total > MaxArrayInputBytes:
		return invalid(fmt.Sprintf("the array's inputs total %s; the limit is %s per array", mib(total), mib(MaxArrayInputBytes)),
			"split the work into several arrays")
	case entry > maxArrayEntryBytes:
		return invalid(fmt.Sprintf("an array of %d tasks makes a %s log entry; the limit is %s", len(m.Inputs), mib(entry), mib(maxArrayEntryBytes)),
			"split the work into several arrays")
	}
	return nil
}

// taskEntryBytes is (an upper bound of) what one task adds to the
// SubmitArray entry: its inline input, or its blob's hash and size.
func taskEntryBytes(n int) int {
	if n > consensus.InlineLimit {
		return 80
	}
	return n + 8
}

// commitArray stores an array's large inputs as blobs and commits the
// array as one SubmitArray entry: every task is accepted, or none.
func (js jobService) commitArray(ctx context.Context, m *palyrav1.SubmitJobRequest, hash string) (*connect.Response[palyrav1.SubmitJobResponse], error) {
	s := js.s
	tmpl := s.jobRecord(ctx, m, hash)
	tasks, err := s.storeInputs(ctx, m.Inputs)
	if err != nil {
		return nil, err
	}
	cmd := &raftpb.Command{Cmd: &raftpb.Command_SubmitArray{SubmitArray: &raftpb.SubmitArray{Template: tmpl, Tasks: tasks}}}
	tj, err := s.control.Apply(ctx, cmd)
	// As for single jobs: the FSM answers a resubmitted array (same id,
	// submitter, time, module and size) with the array it holds.
	for retry := 0; retry < 3 && errors.Is(err, consensus.ErrUnknownOutcome); retry++ {
		tj, err = s.control.Apply(ctx, cmd)
	}
	if err != nil {
		return nil, fromErr(err)
	}
	replayed := tj.ID != tmpl.Id
	fresh := consensus.Array{Template: tj, Size: uint32(len(tasks))}
	fresh.Counts[consensus.PhaseQueued] = fresh.Size
	arr := s.arrayAfterWrite(ctx, &fresh)
	s.log.Info("job array accepted", "array", tj.ID, "tasks", len(tasks), "module", short(hash), "by", tmpl.Submitter, "replayed", replayed)
	return connect.NewResponse(&palyrav1.SubmitJobResponse{Job: JobToPB(&tj), Array: arr, Replayed: replayed}), nil
}

// arrayAfterWrite is an array as this node sees it once a write to it has
// committed. A follower may not have applied the write yet: a read index
// brings it up to date. If that fails (quorum lost just after the commit),
// fallback, the array as the write left it, is the answer.
func (s *Server) arrayAfterWrite(ctx context.Context, fallback *consensus.Array) *palyrav1.JobArray {
	if err := s.control.VerifyRead(ctx); err == nil {
		if a, ok := s.control.State().Array(fallback.Template.ID); ok {
			return ArrayToPB(&a)
		}
	}
	return ArrayToPB(fallback)
}

// arrayResource is an array as a policy resource: its tasks share the
// template's submitter and kind, so one decision covers them all.
func arrayResource(a *consensus.Array) policy.Resource {
	return jobResource(&a.Template)
}

// watchArray streams an array's progress until every task has ended.
// Changes are coalesced: after each message it waits out
// arrayWatchInterval, so a 100,000-task array sends a few messages a
// second, not one per task.
func (s *Server) watchArray(ctx context.Context, id string, stream *connect.ServerStream[palyrav1.WatchJobResponse]) error {
	st := s.control.State()
	var last consensus.Array
	sent := false
	for {
		changed := st.Watch(consensus.TopicJob(id))
		a, ok := st.Array(id)
		if !ok { // pruned while watched
			return s.notFound(ctx, id)
		}
		if !sent || a.Counts != last.Counts {
			if err := stream.Send(&palyrav1.WatchJobResponse{Array: ArrayToPB(&a)}); err != nil {
				return err
			}
			last, sent = a, true
		}
		if a.Terminal() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fromErr(errCanceled)
		}
		select {
		case <-time.After(arrayWatchInterval):
		case <-ctx.Done():
			return fromErr(errCanceled)
		}
	}
}
