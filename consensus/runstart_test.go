package consensus

import (
	"testing"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A result says how long its run took on the worker (ran_us, a wait there
// for a slot excluded): started_at becomes that long before the result,
// the placement time is kept, and neither clock can put the start before
// the placement or after the result. Without ran_us the start stays the
// placement time, as a result from an older worker would have it.
func TestStartedAtIsWhenTheRunBegan(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, addNode("n1"), submit("a"), submit("b"), submit("c"), submit("d"))
	applyAll(t, f, round(1000, map[string]uint32{"n1": 8}, place("a", 1, "n1"), place("b", 1, "n1"), place("c", 1, "n1"), place("d", 1, "n1")))
	ran := func(id string, us int64) *raftpb.FinishJob {
		r := finishAt(id, 1, "n1", 10_000)
		r.RanUs = us
		return r
	}
	res := applyAll(t, f, batch(ran("a", 3_000_000), ran("b", 0), ran("c", 60_000_000), ran("d", 1)))
	for i, err := range res[0].Batch {
		if err != nil {
			t.Fatalf("result %d refused: %v", i, err)
		}
	}
	for id, want := range map[string]int64{"a": 7000, "b": 1000, "c": 1000, "d": 9999} {
		j, ok := f.State().Job(id)
		if !ok {
			t.Fatalf("%s missing", id)
		}
		if j.StartedAtMS != want || j.PlacedAtMS != 1000 || j.FinishedAtMS != 10_000 {
			t.Errorf("%s: placed %d started %d finished %d, want 1000 %d 10000", id, j.PlacedAtMS, j.StartedAtMS, j.FinishedAtMS, want)
		}
	}
	// The placement time survives a snapshot's record.
	j, _ := f.State().Job("a")
	if back := jobFromRecord(jobToRecord(&j)); back.PlacedAtMS != 1000 || back.StartedAtMS != 7000 {
		t.Fatalf("record round trip: placed %d started %d", back.PlacedAtMS, back.StartedAtMS)
	}
}
