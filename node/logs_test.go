package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A running job's output reaches a follower on another node as it is
// written, before the job ends; the stream then ends with the job, and
// what it carried equals the final output. Without follow, a read returns
// what has been written so far.
func TestJobLogsFollowsOutputFromAnotherNode(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	n2 := joinWith(t, op, first.Addr(), node.Config{Labels: map[string]string{"role": "worker"}})
	tc := &testCluster{t: t, first: first, nodes: []*node.Node{first, n2}}
	tc.waitHealthy(2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	resp, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{
		WasmModule: testwasm.Build(t, "ticker"), Input: []byte("6 400ms"),
		Constraints: map[string]string{"role": "worker"}}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	id := resp.Msg.Job.Id
	stream, err := op.Jobs.JobLogs(ctx, connect.NewRequest(&palyrav1.JobLogsRequest{Id: id, Follow: true}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	var stdout, stderr strings.Builder
	sawLiveLine := false
	for stream.Receive() {
		m := stream.Msg()
		stdout.Write(m.Stdout)
		stderr.Write(m.Stderr)
		if m.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && strings.Contains(stdout.String(), "tick 1\n") {
			sawLiveLine = true
			// Without follow: what has been written so far, then the end.
			if !strings.Contains(snapshotLogs(t, ctx, op, id), "tick 1\n") {
				t.Error("a read without follow did not return the output written so far")
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(op.Explain(err))
	}
	if !sawLiveLine {
		t.Error("no output arrived while the job was running")
	}
	j := waitCompleted(t, op, id)
	if j.NodeId != n2.ID() {
		t.Fatalf("the job ran on %s, not the worker %s", j.NodeId, n2.ID())
	}
	if stdout.String() != string(j.Stdout) || stderr.String() != string(j.Stderr) {
		t.Fatalf("followed output differs from the final one:\nfollowed %q / %q\nfinal    %q / %q", stdout.String(), stderr.String(), j.Stdout, j.Stderr)
	}
	if !strings.HasSuffix(stdout.String(), "tick 6\n") || !strings.HasSuffix(stderr.String(), "tock 6\n") {
		t.Fatalf("output %q / %q", stdout.String(), stderr.String())
	}
	// After the end, logs are the final output.
	if got := snapshotLogs(t, ctx, op, id); got != string(j.Stdout) {
		t.Fatalf("logs of an ended job: %q", got)
	}
}

func snapshotLogs(t *testing.T, ctx context.Context, cl *client.Client, id string) string {
	t.Helper()
	s, err := cl.Jobs.JobLogs(ctx, connect.NewRequest(&palyrav1.JobLogsRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for s.Receive() {
		out.Write(s.Msg().Stdout)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// A job cancelled, or past its deadline, while it runs keeps the output
// its run had written (its logs streamed it, and then the ended job had
// none): the worker, on another node than the leader, sends it after the
// job has ended, and the job keeps its phase and error.
func TestEndedJobKeepsItsOutput(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	n2 := joinWith(t, op, first.Addr(), node.Config{Labels: map[string]string{"role": "worker"}})
	tc := &testCluster{t: t, first: first, nodes: []*node.Node{first, n2}}
	tc.waitHealthy(2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, c := range []struct {
		name     string
		deadline time.Duration
		phase    palyrav1.JobPhase
	}{
		{"cancelled", 0, palyrav1.JobPhase_JOB_PHASE_ABORTED},
		{"expired", 3 * time.Second, palyrav1.JobPhase_JOB_PHASE_EXPIRED},
	} {
		resp, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{
			WasmModule: testwasm.Build(t, "ticker"), Input: []byte("100 300ms"), DeadlineMs: c.deadline.Milliseconds(),
			Constraints: map[string]string{"role": "worker"}}))
		if err != nil {
			t.Fatal(op.Explain(err))
		}
		id := resp.Msg.Job.Id
		waitFor(t, c.name+": the job's first lines", time.Minute, func() bool {
			s, err := op.Jobs.JobLogs(ctx, connect.NewRequest(&palyrav1.JobLogsRequest{Id: id}))
			if err != nil {
				return false
			}
			var out strings.Builder
			for s.Receive() {
				out.Write(s.Msg().Stdout)
			}
			return strings.Contains(out.String(), "tick 2\n")
		})
		if c.deadline == 0 {
			if _, err := op.Jobs.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: id})); err != nil {
				t.Fatal(op.Explain(err))
			}
		}
		var j *palyrav1.Job
		waitFor(t, c.name+": the ended job's output", time.Minute, func() bool {
			resp, err := op.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
			if err != nil {
				return false
			}
			j = resp.Msg.Job
			return j.Phase.Terminal() && strings.Contains(string(j.Stdout), "tick 2\n")
		})
		if j.Phase != c.phase || j.Error == nil || j.NodeId != n2.ID() || !strings.HasPrefix(string(j.Stdout), "tick 1\n") || !strings.Contains(string(j.Stderr), "tock 1\n") {
			t.Fatalf("%s: %s on %s, error %v, output %q / %q", c.name, j.Phase.WireName(), j.NodeId, j.Error, j.Stdout, j.Stderr)
		}
		if got := snapshotLogs(t, ctx, op, id); got != string(j.Stdout) {
			t.Fatalf("%s: logs of the ended job %q, want its output %q", c.name, got, j.Stdout)
		}
	}
}

// A stream opened again with the attempt and offsets of the last message
// received (what 'job logs -f' sends after its node broke the stream)
// starts exactly there: the two streams together carry the final output,
// each byte once. Every message says where its bytes end.
func TestJobLogsResumesWhereTheLastMessageEnded(t *testing.T) {
	n := start(t, node.Config{})
	op := operator(t, n, n.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := op.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{
		WasmModule: testwasm.Build(t, "ticker"), Input: []byte("6 300ms")}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	id := resp.Msg.Job.Id

	var stdout, stderr strings.Builder
	var last *palyrav1.JobLogsResponse
	// read takes stream's messages until stop says so or the stream ends.
	read := func(stream *connect.ServerStreamForClient[palyrav1.JobLogsResponse], stop func() bool) {
		t.Helper()
		for !stop() && stream.Receive() {
			m := stream.Msg()
			stdout.Write(m.Stdout)
			stderr.Write(m.Stderr)
			if !m.Resumable || m.StdoutEnd != int64(stdout.Len()) || m.StderrEnd != int64(stderr.Len()) {
				t.Fatalf("message ends at %d/%d (resumable %v), want where the output so far ends, %d/%d", m.StdoutEnd, m.StderrEnd, m.Resumable, stdout.Len(), stderr.Len())
			}
			last = m
		}
	}
	sctx, scancel := context.WithCancel(ctx)
	first, err := op.Jobs.JobLogs(sctx, connect.NewRequest(&palyrav1.JobLogsRequest{Id: id, Follow: true}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	read(first, func() bool { return strings.Contains(stdout.String(), "tick 2\n") })
	scancel()
	first.Close()
	if last == nil || last.Phase.Terminal() {
		t.Fatalf("the job ended before its stream was broken off (last message %v): make it run longer", last)
	}

	again, err := op.Jobs.JobLogs(ctx, connect.NewRequest(&palyrav1.JobLogsRequest{Id: id, Follow: true,
		Attempt: last.Attempt, StdoutOffset: last.StdoutEnd, StderrOffset: last.StderrEnd}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	read(again, func() bool { return false })
	if err := again.Err(); err != nil {
		t.Fatal(op.Explain(err))
	}
	j := waitCompleted(t, op, id)
	if stdout.String() != string(j.Stdout) || stderr.String() != string(j.Stderr) {
		t.Fatalf("the stream and its resumption carried\n%q / %q\nwant the final output, each byte once:\n%q / %q", stdout.String(), stderr.String(), j.Stdout, j.Stderr)
	}

	// An attempt the ended job never had is refused, not waited for.
	bad, err := op.Jobs.JobLogs(ctx, connect.NewRequest(&palyrav1.JobLogsRequest{Id: id, Follow: true, Attempt: j.Attempt + 5}))
	if err != nil {
		t.Fatal(op.Explain(err))
	}
	for bad.Receive() {
		t.Fatalf("a message for an attempt the job never had: %v", bad.Msg())
	}
	if e := op.Explain(bad.Err()); e.Code != "invalid_argument" || !strings.Contains(e.Message, "has no attempt") {
		t.Fatalf("following attempt %d of a job whose last is %d: %+v; want invalid_argument", j.Attempt+5, j.Attempt, e)
	}
}
