package consensus

import (
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// An entry carrying a field this software does not know (a newer node
// wrote it) is reported with where the field is, nested ones included;
// the entry is still applied as this software understands it. Entries
// this software wrote report nothing.
func TestUnknownFieldsAreReported(t *testing.T) {
	// A result with a field number no version has used, as a newer node's.
	known, _ := proto.Marshal(&raftpb.FinishJob{Id: "a", Attempt: 1, NodeId: "n1", Ok: true, AtMs: 5})
	newer := protowire.AppendVarint(protowire.AppendTag(known, 999, protowire.VarintType), 1)
	var fj raftpb.FinishJob
	if err := proto.Unmarshal(newer, &fj); err != nil {
		t.Fatal(err)
	}
	cmd := &raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: []*raftpb.FinishJob{&fj}}}}
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	var got []string
	f.onUnknown = func(_ uint64, where string) { got = append(got, where) }
	applyAll(t, f, submit("a"), assign("a", 1, "n1"))
	if len(got) != 0 {
		t.Fatalf("this software's own entries reported: %v", got)
	}
	res := f.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data}).(ApplyResult)
	if len(got) != 1 || got[0] != "command.finish_batch.results[0]" {
		t.Fatalf("reported %v, want the nested result", got)
	}
	if res.Batch[0] != nil {
		t.Fatalf("the result was not applied as understood: %v", res.Batch[0])
	}
	if j, _ := f.State().Job("a"); j.Phase != PhaseCompleted {
		t.Fatalf("job %s", j.Phase)
	}
}

// An unknown field is found wherever it sits: in a message inside a
// oneof member, deeper in a singular field, in a list's first element;
// a command without one reports none.
func TestHasUnknownFindsNestedFields(t *testing.T) {
	newer := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return protowire.AppendVarint(protowire.AppendTag(b, 999, protowire.VarintType), 1)
	}
	var rec raftpb.JobRecord
	if err := proto.Unmarshal(newer(&raftpb.JobRecord{Id: "a", Kind: "wasm"}), &rec); err != nil {
		t.Fatal(err)
	}
	var fin raftpb.FinishJob
	if err := proto.Unmarshal(newer(&raftpb.FinishJob{Id: "a", Ok: true}), &fin); err != nil {
		t.Fatal(err)
	}
	plain := &raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{
		Submit: &raftpb.SubmitJob{Job: &raftpb.JobRecord{Id: "a"}}, NodeId: "n1", Finish: &raftpb.FinishJob{Id: "a"}}}}
	if hasUnknown(plain.ProtoReflect()) {
		t.Fatal("a command of known fields reports an unknown one")
	}
	for _, tc := range []struct {
		where string
		cmd   *raftpb.Command
	}{
		{"command.run_here.submit.job", &raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{
			Submit: &raftpb.SubmitJob{Job: &rec}, NodeId: "n1"}}}},
		{"command.run_here.finish", &raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{
			Submit: &raftpb.SubmitJob{Job: &raftpb.JobRecord{Id: "a"}}, Finish: &fin}}}},
		{"command.finish_batch.results[0]", &raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{
			Results: []*raftpb.FinishJob{&fin}}}}},
	} {
		if m := tc.cmd.ProtoReflect(); !hasUnknown(m) || unknownIn(m, "command") != tc.where {
			t.Errorf("%s: hasUnknown %v, unknownIn %q", tc.where, hasUnknown(m), unknownIn(m, "command"))
		}
	}
}
