package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A list of "the tasks of array X" where X is one of its tasks, or a
// single job, says what X is and what to run instead, rather than "no job
// with id".
func TestListArrayOfATaskOrAJob(t *testing.T) {
	js, _, _, _, ctx := newSubmitServer(t)
	mod := tinyModule("list")
	arr, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod, Inputs: [][]byte{[]byte("a"), []byte("b")}}))
	if err != nil {
		t.Fatal(err)
	}
	one, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod}))
	if err != nil {
		t.Fatal(err)
	}
	arrayID, jobID := arr.Msg.Array.Id, one.Msg.Job.Id
	list := func(arrayID string) error {
		_, err := js.ListJobs(ctx, connect.NewRequest(&palyrav1.ListJobsRequest{ArrayId: arrayID}))
		return err
	}
	if err := list(arrayID); err != nil {
		t.Fatalf("list the array: %v", err)
	}
	task := arrayID + ".1"
	err = list(task)
	pe := apiCode(t, err)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(pe.Message, "task 1 of job array "+arrayID) ||
		!strings.Contains(pe.Hint, "palyra job list --array "+arrayID+"'") || !strings.Contains(pe.Hint, "palyra job get "+task) {
		t.Fatalf("--array TASK: %v (message %q, hint %q); want invalid_argument naming the array and both commands", err, pe.Message, pe.Hint)
	}
	err = list(jobID)
	if pe := apiCode(t, err); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(pe.Message, "is a job, not a job array") ||
		!strings.Contains(pe.Hint, "palyra job get "+jobID) {
		t.Fatalf("--array JOB: %v (message %q, hint %q)", err, pe.Message, pe.Hint)
	}
	if err := list("j-0123456789abcdef"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("--array of an unknown id: %v, want not_found", err)
	}
}

// A node filter naming no node the cluster has known is refused (a typo
// would list nothing, as if the node had run no jobs); a registered node
// without jobs lists nothing, and a node that is no longer registered but
// ran jobs still lists them.
func TestListByUnknownNode(t *testing.T) {
	js, _, _, ctl, ctx := newSubmitServer(t)
	apply := func(cmd *raftpb.Command) {
		t.Helper()
		if _, err := ctl.Apply(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
	}
	one, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: tinyModule("node")}))
	if err != nil {
		t.Fatal(err)
	}
	apply(&raftpb.Command{Cmd: &raftpb.Command_AssignJob{AssignJob: &raftpb.AssignJob{Id: one.Msg.Job.Id, Attempt: 1, NodeId: "n-gone", AtMs: 1}}})
	apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: "n-idle", AddedAtMs: 1, AddedBy: "init"}}}})
	list := func(node string) (*connect.Response[palyrav1.ListJobsResponse], error) {
		return js.ListJobs(ctx, connect.NewRequest(&palyrav1.ListJobsRequest{NodeId: node}))
	}
	if r, err := list("n-gone"); err != nil || len(r.Msg.Jobs) != 1 {
		t.Fatalf("a node with jobs in the history: %v %v", r, err)
	}
	if r, err := list("n-idle"); err != nil || len(r.Msg.Jobs) != 0 {
		t.Fatalf("a registered node without jobs: %v %v", r, err)
	}
	_, err = list("n-nope")
	if pe := apiCode(t, err); connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(pe.Message, `no node with id "n-nope"`) ||
		!strings.Contains(pe.Hint, "palyra nodes") {
		t.Fatalf("an unknown node: %v (message %q, hint %q)", err, pe.Message, pe.Hint)
	}
}
