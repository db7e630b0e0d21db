package consensus

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// The cache answers as the store would: after appends, compaction, a
// truncated tail and re-appends, every index reads back what the store
// holds, and the cache stays within its bounds.
func TestLogCacheAgreesWithTheStore(t *testing.T) {
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	c := newLogCache(bolt, 50, 4000)
	entry := func(i uint64, term uint64) *raft.Log {
		return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry-%d-term-%d-%0100d", i, term, 0))}
	}
	store := func(from, to, term uint64) {
		var ls []*raft.Log
		for i := from; i <= to; i++ {
			ls = append(ls, entry(i, term))
		}
		if err := c.StoreLogs(ls); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, from, to uint64) {
		t.Helper()
		for i := from; i <= to; i++ {
			var got, want raft.Log
			if err := c.GetLog(i, &got); err != nil {
				t.Fatalf("%s: index %d: %v", what, i, err)
			}
			if err := bolt.GetLog(i, &want); err != nil {
				t.Fatal(err)
			}
			if got.Term != want.Term || string(got.Data) != string(want.Data) {
				t.Fatalf("%s: index %d: cache %q, store %q", what, i, got.Data, want.Data)
			}
		}
		if len(c.logs) > c.max || c.bytes > c.budget {
			t.Fatalf("%s: cache holds %d entries, %d bytes", what, len(c.logs), c.bytes)
		}
	}
	store(1, 100, 1)
	check("appended", 1, 100)
	if err := c.DeleteRange(1, 60); err != nil { // compaction
		t.Fatal(err)
	}
	check("compacted", 61, 100)
	if err := c.DeleteRange(90, 100); err != nil { // a conflicting tail
		t.Fatal(err)
	}
	store(90, 120, 2)
	check("tail replaced", 61, 120)
	var l raft.Log
	if err := c.GetLog(30, &l); err == nil {
		t.Fatal("a compacted entry is still readable")
	}
}

// Snapshots are taken less often as the state grows, so their cost per
// entry stays flat: never more often than the base, no sooner than twice
// the jobs held, and at least every 100,000 entries.
func TestSnapshotThresholdFollowsTheState(t *testing.T) {
	for _, tc := range []struct {
		jobs int
		want uint64
	}{{0, 4096}, {1000, 4096}, {2048, 4096}, {30_000, 60_000}, {100_000, 100_000}, {5_000_000, 100_000}} {
		if got := snapshotThreshold(4096, tc.jobs); got != tc.want {
			t.Errorf("%d jobs: threshold %d, want %d", tc.jobs, got, tc.want)
		}
	}
}
