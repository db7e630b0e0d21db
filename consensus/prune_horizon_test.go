package consensus

import (
	"testing"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

func pruneMax(before int64, maxJobs uint32) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_PruneJobs{PruneJobs: &raftpb.PruneJobs{BeforeMs: before, Max: maxJobs}}}
}

// The pruning horizon follows what was really pruned: nothing pruned
// leaves it alone, a prune cut short by its maximum stops it at the first
// job left behind, and it survives a snapshot.
func TestPrunedBeforeHorizon(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, submit("a"), assign("a", 1, "n"), finishCmdAt("a", 1, "n", 100),
		submit("b"), assign("b", 1, "n"), finishCmdAt("b", 1, "n", 200))
	if got := f.State().PrunedBefore(); got != 0 {
		t.Fatalf("horizon before any prune: %d", got)
	}
	r := applyAll(t, f, pruneMax(50, 0))
	if r[0].Job.Attempt != 0 || f.State().PrunedBefore() != 0 {
		t.Fatalf("a prune that removed nothing moved the horizon to %d", f.State().PrunedBefore())
	}
	r = applyAll(t, f, pruneMax(1000, 1))
	if r[0].Job.Attempt != 1 || f.State().PrunedBefore() != 200 {
		t.Fatalf("cut-short prune: pruned %d, horizon %d (want 1, 200)", r[0].Job.Attempt, f.State().PrunedBefore())
	}
	r = applyAll(t, f, pruneMax(1000, 0))
	if r[0].Job.Attempt != 1 || f.State().PrunedBefore() != 1000 {
		t.Fatalf("full prune: pruned %d, horizon %d (want 1, 1000)", r[0].Job.Attempt, f.State().PrunedBefore())
	}
	f2 := NewFSM()
	restore(t, f, f2)
	if got := f2.State().PrunedBefore(); got != 1000 {
		t.Fatalf("horizon after restore: %d", got)
	}
}

func finishCmdAt(id string, attempt uint32, node string, at int64) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: id, Attempt: attempt, NodeId: node, Ok: true, AtMs: at}}}
}
