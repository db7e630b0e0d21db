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
