package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// bigText is n bytes of text that is not a palindrome.
func bigText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[i%36])
	}
	return b.String()[:n]
}

func submitArray(t *testing.T, cl *client.Client, module string, inputs ...string) *palyrav1.SubmitJobResponse {
	t.Helper()
	// A timeout well past any sleep a test asks for.
	req := &palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, module), TimeoutMs: (10 * time.Minute).Milliseconds()}
	for _, in := range inputs {
		req.Inputs = append(req.Inputs, []byte(in))
	}
	resp, err := cl.Jobs.SubmitJob(callCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if resp.Msg.Array == nil {
		t.Fatalf("array submission answered without an array: %v", resp.Msg)
	}
	return resp.Msg
}

// watchArrayDone follows WatchJob on an array to its end and returns every
// message (all of them arrays).
func watchArrayDone(t *testing.T, cl *client.Client, id string) []*palyrav1.JobArray {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, err := cl.Jobs.WatchJob(ctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	defer stream.Close()
	var msgs []*palyrav1.JobArray
	for stream.Receive() {
		if stream.Msg().Job != nil || stream.Msg().Array == nil {
			t.Fatalf("array watch sent a job: %v", stream.Msg())
		}
		msgs = append(msgs, stream.Msg().Array)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(cl.Explain(err))
	}
	if len(msgs) == 0 || !msgs[len(msgs)-1].Done {
		t.Fatalf("array watch ended before the array did: %v", msgs)
	}
	return msgs
}

func arrayTasks(t *testing.T, cl *client.Client, id string) []*palyrav1.Job {
	t.Helper()
	var out []*palyrav1.Job
	if err := cl.ArrayTasks(callCtx(t), id, false, func(j *palyrav1.Job) error {
		out = append(out, j)
		return nil
	}); err != nil {
		t.Fatal(cl.Explain(err))
	}
	return out
}

// A job array runs every task, and its results come back in task order,
// a large input (a blob, not in the Raft log) and a large output included.
func TestJobArrayRunsEveryTaskInOrder(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 2})
	cl := operator(t, n, n.Addr())
	big := bigText(consensus.InlineLimit + 1000)
	inputs := []string{"abc", "hello", "", big, "x"}
	resp := submitArray(t, cl, "reverse", inputs...)
	a := resp.Array
	if a.Size != uint32(len(inputs)) || resp.Job.Id != a.Id || a.Template.Wasm.GetModuleSha256() == "" {
		t.Fatalf("submit answer: %v", resp)
	}
	msgs := watchArrayDone(t, cl, a.Id)
	last := msgs[len(msgs)-1]
	if last.Counts["completed"] != uint64(len(inputs)) || last.Counts["queued"] != 0 || last.EndedAtMs == 0 {
		t.Fatalf("final counts: %v", last)
	}
	tasks := arrayTasks(t, cl, a.Id)
	if len(tasks) != len(inputs) {
		t.Fatalf("%d tasks listed, want %d", len(tasks), len(inputs))
	}
	for i, task := range tasks {
		if task.Id != consensus.TaskID(a.Id, uint32(i)) || task.ArrayId != a.Id || task.ArrayIndex != uint32(i) {
			t.Fatalf("task %d: id %s array %s index %d", i, task.Id, task.ArrayId, task.ArrayIndex)
		}
		if task.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED || string(task.Stdout) != reverse(inputs[i]) {
			t.Fatalf("task %d: %s output %.40q, want %.40q", i, task.Phase.WireName(), task.Stdout, reverse(inputs[i]))
		}
		if len(task.Input) != 0 {
			t.Fatalf("task %d: a list carried its input", i)
		}
		if task.InputSize != uint64(len(inputs[i])) || task.StdoutSize != uint64(len(inputs[i])) {
			t.Fatalf("task %d: sizes in %d out %d", i, task.InputSize, task.StdoutSize)
		}
	}
	// The large input and output live in blobs; the log holds their hashes.
	bigID := consensus.TaskID(a.Id, 3)
	rec, ok := n.Cluster().State().Job(bigID)
	if !ok || len(rec.Input) != 0 || rec.InputHash == "" || len(rec.Stdout) != 0 || rec.StdoutHash == "" {
		t.Fatalf("the log holds the big task's payloads: input %d bytes hash %q, stdout %d bytes hash %q",
			len(rec.Input), rec.InputHash, len(rec.Stdout), rec.StdoutHash)
	}
	// GetJob gives both back whole.
	j := getJob(t, cl, bigID)
	if string(j.Input) != big || string(j.Stdout) != reverse(big) || j.InputSha256 != rec.InputHash {
		t.Fatalf("GetJob on the big task: input %d bytes, stdout %d bytes", len(j.Input), len(j.Stdout))
	}
	// GetJob on the array gives its counts.
	g, err := cl.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: a.Id}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if g.Msg.Job != nil || g.Msg.Array == nil || !g.Msg.Array.Done || g.Msg.Array.Counts["completed"] != uint64(len(inputs)) {
		t.Fatalf("GetJob on the array: %v", g.Msg)
	}
	// Listing the array pages in task order without outputs.
	l, err := cl.Jobs.ListJobs(callCtx(t), connect.NewRequest(&palyrav1.ListJobsRequest{ArrayId: a.Id, Limit: 2}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if ids := jobIDs(l.Msg.Jobs); !slices.Equal(ids, []string{tasks[0].Id, tasks[1].Id}) || l.Msg.NextAfterId != tasks[1].Id || len(l.Msg.Jobs[0].Stdout) != 0 {
		t.Fatalf("array page: %v next %q", ids, l.Msg.NextAfterId)
	}
}

// A single job's large input and large output travel as blobs too, and
// WatchJob's last message carries them.
func TestLargePayloadsRoundTrip(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1})
	cl := operator(t, n, n.Addr())
	big := bigText(3*consensus.InlineLimit + 7)
	id := submit(t, cl, big)
	rec, _ := n.Cluster().State().Job(id)
	if len(rec.Input) != 0 || rec.InputHash == "" || rec.InputSize != uint64(len(big)) {
		t.Fatalf("the log holds the input: %d bytes inline, hash %q, size %d", len(rec.Input), rec.InputHash, rec.InputSize)
	}
	stream, err := cl.Jobs.WatchJob(callCtx(t), connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	var last *palyrav1.Job
	for stream.Receive() {
		last = stream.Msg().Job
	}
	stream.Close()
	if last == nil || last.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED || string(last.Stdout) != reverse(big) || string(last.Input) != big {
		t.Fatalf("watch's last message: %v", last)
	}
	if rec, _ = n.Cluster().State().Job(id); len(rec.Stdout) != 0 || rec.StdoutHash == "" {
		t.Fatalf("the log holds the output: %d bytes inline, hash %q", len(rec.Stdout), rec.StdoutHash)
	}
	if j := getJob(t, cl, id); string(j.Stdout) != reverse(big) || j.StdoutSize != uint64(len(big)) {
		t.Fatalf("GetJob stdout: %d bytes (size %d)", len(j.Stdout), j.StdoutSize)
	}
}

// A task that fails is reported as failed with its reason; the others
// complete; the array ends.
func TestJobArrayWithAFailingTask(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 2})
	cl := operator(t, n, n.Addr())
	a := submitArray(t, cl, "sleep", "1ms", "not-a-duration", "2ms").Array
	msgs := watchArrayDone(t, cl, a.Id)
	if c := msgs[len(msgs)-1].Counts; c["completed"] != 2 || c["failed"] != 1 {
		t.Fatalf("counts: %v", c)
	}
	tasks := arrayTasks(t, cl, a.Id)
	bad := tasks[1]
	if bad.Phase != palyrav1.JobPhase_JOB_PHASE_FAILED || bad.Error == nil || !strings.Contains(string(bad.Stderr), "bad duration") {
		t.Fatalf("failing task: %s %v stderr %q", bad.Phase.WireName(), bad.Error, bad.Stderr)
	}
	if string(tasks[0].Stdout) != "slept 1ms" || string(tasks[2].Stdout) != "slept 2ms" {
		t.Fatalf("other tasks: %q %q", tasks[0].Stdout, tasks[2].Stdout)
	}
	// Idempotency keys cover arrays: the same inputs replay the array,
	// other inputs under the same key conflict.
	keyed := func(inputs ...string) (*palyrav1.SubmitJobResponse, error) {
		req := &palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, "reverse"), IdempotencyKey: "batch-7"}
		for _, in := range inputs {
			req.Inputs = append(req.Inputs, []byte(in))
		}
		resp, err := cl.Jobs.SubmitJob(callCtx(t), connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	first, err := keyed("a", "b")
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	again, err := keyed("a", "b")
	if err != nil || !again.Replayed || again.Array.GetId() != first.Array.Id || again.Array.Size != 2 {
		t.Fatalf("replay: %v %v", again, cl.Explain(err))
	}
	if _, err := keyed("a", "c"); err == nil || cl.Explain(err).Code != "conflict" {
		t.Fatalf("other inputs under the same key: %v", err)
	}
}

// Cancelling an array aborts every task that has not ended, running ones
// included.
func TestCancelJobArray(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 2})
	cl := operator(t, n, n.Addr())
	a := submitArray(t, cl, "sleep", "5m", "5m", "5m", "5m", "5m").Array
	// Placements run ahead of free slots (prefetch), so "running" in the
	// log may exceed the slots; wait for instances really executing.
	waitFor(t, "tasks executing", time.Minute, func() bool { return n.RunningJobs() > 0 })
	resp, err := cl.Jobs.CancelJob(callCtx(t), connect.NewRequest(&palyrav1.CancelJobRequest{Id: a.Id}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if c := resp.Msg.Array; c == nil || !c.Done || c.Counts["aborted"] != 5 {
		t.Fatalf("cancel answer: %v", resp.Msg.Array)
	}
	waitFor(t, "the running instances to stop", time.Minute, func() bool { return n.RunningJobs() == 0 })
	// Cancelling again: nothing is left to cancel.
	_, err = cl.Jobs.CancelJob(callCtx(t), connect.NewRequest(&palyrav1.CancelJobRequest{Id: a.Id}))
	if e := cl.Explain(err); err == nil || e.Code != "conflict" {
		t.Fatalf("second cancel: %v", err)
	}
}

func jobIDs(js []*palyrav1.Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.Id)
	}
	return out
}

// The job list is newest first by default, pages with a cursor, never
// carries inputs or outputs, and flips to oldest first on request.
func TestListNewestFirstPagesWithoutPayloads(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 2})
	cl := operator(t, n, n.Addr())
	var ids []string
	for _, in := range []string{"one", "two", "three", "four", "five"} {
		id := submit(t, cl, in)
		waitCompleted(t, cl, id)
		ids = append(ids, id)
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	list := func(req *palyrav1.ListJobsRequest) *palyrav1.ListJobsResponse {
		t.Helper()
		resp, err := cl.Jobs.ListJobs(callCtx(t), connect.NewRequest(req))
		if err != nil {
			t.Fatal(cl.Explain(err))
		}
		for _, j := range resp.Msg.Jobs {
			if len(j.Input) != 0 || len(j.Stdout) != 0 || len(j.Stderr) != 0 {
				t.Fatalf("list carried payloads of %s", j.Id)
			}
			if j.InputSize == 0 || j.StdoutSize == 0 {
				t.Fatalf("list lost the sizes of %s: in %d out %d", j.Id, j.InputSize, j.StdoutSize)
			}
		}
		return resp.Msg
	}
	var got []string
	after := ""
	for page := 0; ; page++ {
		r := list(&palyrav1.ListJobsRequest{Limit: 2, AfterId: after})
		got = append(got, jobIDs(r.Jobs)...)
		if r.NextAfterId == "" {
			break
		}
		if page > 5 {
			t.Fatal("paging does not end")
		}
		after = r.NextAfterId
	}
	if !slices.Equal(got, newest) {
		t.Fatalf("pages %v, want newest first %v", got, newest)
	}
	if r := list(&palyrav1.ListJobsRequest{Limit: 3, OldestFirst: true}); !slices.Equal(jobIDs(r.Jobs), ids[:3]) || r.NextAfterId != ids[2] {
		t.Fatalf("oldest first: %v next %q", jobIDs(r.Jobs), r.NextAfterId)
	}
	// Outputs in bulk are for array tasks only; a cursor that names no job
	// is refused rather than restarting the walk.
	for _, req := range []*palyrav1.ListJobsRequest{{WithOutputs: true}, {AfterId: "j-gone"}} {
		_, err := cl.Jobs.ListJobs(callCtx(t), connect.NewRequest(req))
		var ce *connect.Error
		if !errors.As(err, &ce) || cl.Explain(err).Hint == "" {
			t.Fatalf("%v: want a refusal with a hint, got %v", req, err)
		}
	}
	// The cursor a page gives (ID@INDEX) goes on past its job once that
	// job is pruned (a trial: retention pruned the cursor mid-listing).
	first := list(&palyrav1.ListJobsRequest{Limit: 2, OldestFirst: true})
	if want := ids[1] + "@"; !strings.HasPrefix(first.NextCursor, want) || first.NextAfterId != ids[1] {
		t.Fatalf("cursor %q (after id %q), want %s…", first.NextCursor, first.NextAfterId, want)
	}
	if _, err := cl.Jobs.PruneJobs(callCtx(t), connect.NewRequest(&palyrav1.PruneJobsRequest{OlderThanMs: 0})); err != nil {
		t.Fatal(cl.Explain(err))
	}
	// Everything ended, so everything went: a fresh set, placed after the cursor.
	var later []string
	for i := range 3 {
		id := submit(t, cl, fmt.Sprint("later ", i))
		waitCompleted(t, cl, id)
		later = append(later, id)
	}
	if r := list(&palyrav1.ListJobsRequest{Limit: 10, OldestFirst: true, AfterId: first.NextCursor}); !slices.Equal(jobIDs(r.Jobs), later) {
		t.Fatalf("after the pruned cursor %s: %v, want the jobs after it %v", first.NextCursor, jobIDs(r.Jobs), later)
	}
	if r := list(&palyrav1.ListJobsRequest{Limit: 10, AfterId: first.NextCursor}); len(r.Jobs) != 0 {
		t.Fatalf("newest first after the pruned cursor: %v, want none (every job before it is gone)", jobIDs(r.Jobs))
	}
	if _, err := cl.Jobs.ListJobs(callCtx(t), connect.NewRequest(&palyrav1.ListJobsRequest{AfterId: first.NextAfterId})); cl.Explain(err).Code != "not_found" {
		t.Fatalf("a bare pruned id as cursor: %v", err)
	}
}

// PruneJobs removes ended jobs and keeps running ones; a pruned id's
// not_found says it may have been pruned; retention is settable and shown.
func TestPruneAndRetention(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1})
	cl := operator(t, n, n.Addr())
	ctx := callCtx(t)
	done := submit(t, cl, "done")
	waitCompleted(t, cl, done)
	arr := submitArray(t, cl, "reverse", "a", "b").Array
	watchArrayDone(t, cl, arr.Id)
	running, err := cl.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{
		WasmModule: testwasm.Build(t, "sleep"), Input: []byte("1m")}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	waitFor(t, "the sleeper to run", time.Minute, func() bool {
		return getJob(t, cl, running.Msg.Job.Id).Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING
	})
	resp, err := cl.Jobs.PruneJobs(ctx, connect.NewRequest(&palyrav1.PruneJobsRequest{OlderThanMs: 0}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if resp.Msg.Pruned != 3 {
		t.Fatalf("pruned %d, want 3 (a job and an array of two)", resp.Msg.Pruned)
	}
	for _, id := range []string{done, arr.Id, consensus.TaskID(arr.Id, 0)} {
		_, err = cl.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
		if e := cl.Explain(err); err == nil || e.Code != "not_found" || !strings.Contains(e.Message, "have been pruned (by the retention, now 24h, by the cap on ended jobs held, or by 'palyra job prune')") ||
			!strings.Contains(e.Hint, "palyra job retention") {
			t.Fatalf("get %s after prune: %v", id, e)
		}
	}
	if j := getJob(t, cl, running.Msg.Job.Id); j.Phase != palyrav1.JobPhase_JOB_PHASE_RUNNING {
		t.Fatalf("the running job was touched: %s", j.Phase.WireName())
	}
	// Retention: refused out of range, set, shown in status.
	_, err = cl.Jobs.SetRetention(ctx, connect.NewRequest(&palyrav1.SetRetentionRequest{RetentionMs: 1000}))
	if e := cl.Explain(err); err == nil || e.Code != "invalid_argument" || e.Hint == "" {
		t.Fatalf("1s retention: %v", e)
	}
	week := (7 * 24 * time.Hour).Milliseconds()
	if _, err := cl.Jobs.SetRetention(ctx, connect.NewRequest(&palyrav1.SetRetentionRequest{RetentionMs: week})); err != nil {
		t.Fatal(cl.Explain(err))
	}
	st, err := cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if st.Msg.RetentionMs != week || st.Msg.PrunedBeforeMs == 0 {
		t.Fatalf("status: retention %d, pruned before %d", st.Msg.RetentionMs, st.Msg.PrunedBeforeMs)
	}
}

// An array submitted through a follower, with an input the follower
// stores as a blob, is answered like one on the leader and runs.
func TestJobArrayThroughFollower(t *testing.T) {
	first := start(t, node.Config{WasmSlots: 1})
	op := operator(t, first, first.Addr())
	second := join(t, op, first.Addr(), t.TempDir())
	waitFor(t, "two nodes", time.Minute, func() bool { ok, _ := healthy(second, 2, 1); return ok })
	cl := operator(t, first, second.Addr())
	big := bigText(consensus.InlineLimit * 2)
	resp := submitArray(t, cl, "reverse", "abc", big)
	if a := resp.Array; a.Size != 2 || a.Counts["queued"]+a.Counts["running"]+a.Counts["completed"] != 2 || a.Template.Submitter == "" {
		t.Fatalf("submit through the follower: %v", a)
	}
	watchArrayDone(t, cl, resp.Array.Id)
	tasks := arrayTasks(t, cl, resp.Array.Id)
	if len(tasks) != 2 || string(tasks[0].Stdout) != "cba" || !bytes.Equal(tasks[1].Stdout, []byte(reverse(big))) {
		t.Fatalf("tasks: %v", jobIDs(tasks))
	}
}

// A task placed on a worker whose one slot is busy waits there (tasks are
// placed ahead); its started_at is when its own run began, not when it was
// placed, so finished - started is its run, not its run and its wait.
func TestStartedAtExcludesTheWaitOnTheWorker(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1})
	cl := operator(t, n, n.Addr())
	a := submitArray(t, cl, "sleep", "300ms", "300ms").Array
	watchArrayDone(t, cl, a.Id)
	tasks := arrayTasks(t, cl, a.Id)
	var waited int64
	for _, task := range tasks {
		if task.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED || task.PlacedAtMs == 0 {
			t.Fatalf("task %s: %s, placed at %d", task.Id, task.Phase.WireName(), task.PlacedAtMs)
		}
		if task.StartedAtMs < task.PlacedAtMs || task.FinishedAtMs < task.StartedAtMs {
			t.Fatalf("task %s: placed %d started %d finished %d out of order", task.Id, task.PlacedAtMs, task.StartedAtMs, task.FinishedAtMs)
		}
		waited = max(waited, task.StartedAtMs-task.PlacedAtMs)
	}
	// Both were placed in one round on the one slot: the second began
	// only after the first's 300ms sleep.
	if tasks[0].PlacedAtMs != tasks[1].PlacedAtMs {
		t.Fatalf("the tasks were placed apart (%d, %d ms), not in the round that accepted them", tasks[0].PlacedAtMs, tasks[1].PlacedAtMs)
	}
	if waited < 200 {
		t.Fatalf("no task's start is after its placement by the other's run: placed/started %d/%d and %d/%d",
			tasks[0].PlacedAtMs, tasks[0].StartedAtMs, tasks[1].PlacedAtMs, tasks[1].StartedAtMs)
	}
}

// An array's tasks start in index order on a worker holding more of them
// than it has slots (prefetch): those waiting for a slot are admitted in
// order (they started in whatever order their goroutines ran), and so are
// those placed together, the first included (the last goroutine started
// tends to run first, and took the free slot). Ten arrays, so a lucky
// schedule does not pass it.
func TestArrayTasksStartInIndexOrder(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1})
	cl := operator(t, n, n.Addr())
	for range 10 {
		in := make([]string, 6)
		for i := range in {
			in[i] = "60ms" // long enough that the tasks placed with the first wait for it, on a loaded machine too
		}
		a := submitArray(t, cl, "sleep", in...).Array
		watchArrayDone(t, cl, a.Id)
		tasks := arrayTasks(t, cl, a.Id)
		for i := 1; i < len(tasks); i++ {
			if tasks[i].StartedAtMs < tasks[i-1].StartedAtMs {
				var order []string
				for _, tk := range tasks {
					order = append(order, fmt.Sprintf("%d@%d", tk.ArrayIndex, tk.StartedAtMs-tasks[0].StartedAtMs))
				}
				t.Fatalf("task %d started before task %d: %v", tasks[i].ArrayIndex, tasks[i-1].ArrayIndex, order)
			}
		}
	}
}

// A higher-priority job submitted while an array fills a worker's slot and
// prefetch runs long before the array ends: the tasks behind it stop
// taking the prefetch, and on the worker it starts first (it waited for
// the whole array).
func TestPriorityJobOvertakesARunningArray(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1})
	cl := operator(t, n, n.Addr())
	in := make([]string, 40)
	for i := range in {
		in[i] = "150ms" // the array: 6 s on the one slot
	}
	a := submitArray(t, cl, "sleep", in...).Array
	time.Sleep(500 * time.Millisecond)
	resp, err := cl.Jobs.SubmitJob(callCtx(t), connect.NewRequest(&palyrav1.SubmitJobRequest{
		WasmModule: testwasm.Build(t, "reverse"), Input: []byte("urgent"), Priority: 100}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	j := waitCompleted(t, cl, resp.Msg.Job.Id)
	got, err := cl.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: a.Id}))
	if err != nil || got.Msg.Array == nil {
		t.Fatalf("the array: %v %v", got, err)
	}
	t.Logf("the priority job completed after %d of the array's tasks", got.Msg.Array.Counts["completed"])
	if ended := got.Msg.Array.Counts["completed"]; ended > 30 {
		t.Fatalf("the priority-100 job completed only after %d of the array's 40 tasks (it waited for the array)", ended)
	}
	if string(j.Stdout) != "tnegru" {
		t.Fatalf("output %q", j.Stdout)
	}
	watchArrayDone(t, cl, a.Id)
}

// Past the cap on ended jobs held, the leader prunes the oldest ended ones
// before their retention (a user trial: a million cancelled tasks held
// 3.5 GB on the leader until a manual prune); the newest stay readable and
// a pruned one's not_found says why it may be gone.
func TestEndedJobsPastTheCapArePrunedOldestFirst(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1, MaxEndedJobs: 4})
	cl := operator(t, n, n.Addr())
	var ids []string
	for i := range 7 {
		id := submit(t, cl, fmt.Sprint("job ", i))
		waitCompleted(t, cl, id) // one after another: they end in order
		ids = append(ids, id)
	}
	waitFor(t, "the cluster to hold at most 4 ended jobs", time.Minute, func() bool { return n.StateForTest().Prunable() <= 4 })
	if got := n.StateForTest().Prunable(); got != 4 {
		t.Fatalf("%d ended jobs held, want the cap, 4", got)
	}
	for i, id := range ids {
		_, err := cl.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
		switch e := cl.Explain(err); {
		case i < 3 && (err == nil || e.Code != "not_found" || !strings.Contains(e.Message, "by the cap on ended jobs held")):
			t.Errorf("job %d (%s), among the oldest: %v", i, id, e)
		case i >= 3 && err != nil:
			t.Errorf("job %d (%s), among the newest 4, is gone: %v", i, id, e)
		}
	}
}

// A job deep in the queue, which the scheduler has not looked at (it gives
// reasons to the head of the queue only), says how many jobs are placed
// before it, in job get and in a watch (a user trial: "queued", no reason,
// for 18 s behind an 8,000-task array).
func TestDeepQueuedJobSaysWhatIsAheadOfIt(t *testing.T) {
	n := start(t, node.Config{WasmSlots: 1})
	cl := operator(t, n, n.Addr())
	// An array no node can run says why, at the head of the queue.
	req := &palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, "sleep"), Inputs: [][]byte{[]byte("1s"), []byte("1s")}, Constraints: map[string]string{"zone": "nowhere"}}
	resp, err := cl.Jobs.SubmitJob(callCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	waitFor(t, "the unplaceable array to say why", time.Minute, func() bool {
		return strings.Contains(getArray(t, cl, resp.Msg.Array.Id).PendingReason, "zone=nowhere")
	})
	inputs := make([]string, 600)
	for i := range inputs {
		inputs[i] = "1m"
	}
	arr := submitArray(t, cl, "sleep", inputs...).Array
	last := submit(t, cl, "after the array")
	want := regexp.MustCompile(`^behind (\d+) queued wasm jobs \(placed by priority, then in submission order\)$`)
	var j *palyrav1.Job
	waitFor(t, "the last job to say what is ahead of it", time.Minute, func() bool {
		j = getJob(t, cl, last)
		return want.MatchString(j.PendingReason)
	})
	m := want.FindStringSubmatch(j.PendingReason)
	if ahead, _ := strconv.Atoi(m[1]); ahead < 300 || ahead > 602 {
		t.Errorf("%q: the array's queued tasks are ahead of it", j.PendingReason)
	}
	stream, err := cl.Jobs.WatchJob(callCtx(t), connect.NewRequest(&palyrav1.WatchJobRequest{Id: last}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if !stream.Receive() || !want.MatchString(stream.Msg().Job.PendingReason) {
		t.Errorf("watch's first message: %v %v", stream.Msg(), stream.Err())
	}
	stream.Close()
	// A task at the head of the queue is not behind anything.
	if first := getJob(t, cl, consensus.TaskID(arr.Id, 0)); strings.HasPrefix(first.PendingReason, "behind") {
		t.Errorf("the array's first task: %q", first.PendingReason)
	}
	// An array says why its first queued task waits (a trial: the array
	// said nothing, its task .0 named the constraint no node matches).
	if r := getArray(t, cl, arr.Id); r.PendingReason == "" {
		t.Error("an array with queued tasks says nothing of why they wait")
	}
}

func getArray(t *testing.T, cl *client.Client, id string) *palyrav1.JobArray {
	t.Helper()
	resp, err := cl.Jobs.GetJob(callCtx(t), connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
	if err != nil {
		t.Fatal(cl.Explain(err))
	}
	if resp.Msg.Array == nil {
		t.Fatalf("%s is not an array", id)
	}
	return resp.Msg.Array
}
