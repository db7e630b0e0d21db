package consensus

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

func useToken(id string, at int64) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_UseToken{UseToken: &raftpb.UseToken{Id: id, AtMs: at}}}
}

// A proposer whose clock runs an hour ahead used to prune every used CA
// token (they are pruned by age), making them usable again. The leader
// takes the time now, so a token used a moment ago stays used.
func TestProposerClockCannotPruneUsedTokens(t *testing.T) {
	s := openStore(t, t.TempDir(), "n1", true)
	defer s.Close()
	waitLeader(t, s)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	if _, err := s.Apply(ctx, useToken("a", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, useToken("b", now+time.Hour.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	if !s.State().TokenUsed("a") {
		t.Fatal("a token used a moment ago was pruned by a proposer's clock an hour ahead")
	}
	if _, err := s.Apply(ctx, useToken("a", now)); !errors.Is(err, ErrConflict) {
		t.Fatalf("the token was accepted again: %v", err)
	}
}

// A job's deadline is asked for as a duration from the API node's clock.
// It now counts on the leader's clock, which also expires it: an API node
// ten seconds behind no longer hands out deadlines already past. The
// submission keeps the API node's time, so resending it is still a replay.
func TestDeadlineCountsOnTheLeadersClock(t *testing.T) {
	s := openStore(t, t.TempDir(), "n1", true)
	defer s.Close()
	waitLeader(t, s)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	behind := now - 10_000 // the API node's clock
	cmd := submit("j1")
	cmd.GetSubmitJob().Job.SubmittedAtMs = behind
	cmd.GetSubmitJob().Job.DeadlineAtMs = behind + 5_000 // --deadline 5s
	j, err := s.Apply(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if j.SubmittedAtMS != behind || j.DeadlineAtMS < now+5_000 || j.DeadlineAtMS > time.Now().UnixMilli()+5_000 {
		t.Fatalf("submitted %d (want %d), deadline %d (want 5s after the leader's now, %d)", j.SubmittedAtMS, behind, j.DeadlineAtMS, now)
	}
	if cmd.GetSubmitJob().Job.DeadlineAtMs != behind+5_000 {
		t.Fatal("Apply changed the caller's command")
	}
	expire := &raftpb.Command{Cmd: &raftpb.Command_ExpireJob{ExpireJob: &raftpb.ExpireJob{Id: "j1", AtMs: now}}}
	if _, err := s.Apply(ctx, expire); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "not reached its deadline") {
		t.Fatalf("a 5s deadline expired at once: %v", err)
	}
	again, err := s.Apply(ctx, cmd)
	if err != nil || again.CommitIndex != j.CommitIndex {
		t.Fatalf("resending the submission: %+v %v, want the job committed at %d", again, err, j.CommitIndex)
	}
}

// The cluster clock never goes back, across a snapshot too: a command
// stamped before it (a new leader whose clock is behind) is moved forward,
// so a pairing code that expired by the cluster's clock stays expired.
func TestClusterClockNeverGoesBack(t *testing.T) {
	f := NewFSM()
	res := applyAll(t, f,
		createPairing("p1", "device", "s", 1_000_000),
		useToken("t", 2_000_000), // the clock passes the code's expiry
	)
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if got := f.State().ClockMS(); got != 2_000_000 {
		t.Fatalf("clock %d, want 2000000", got)
	}
	restored := NewFSM()
	if err := restored.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, f))}); err != nil {
		t.Fatal(err)
	}
	if got := restored.State().ClockMS(); got != 2_000_000 {
		t.Fatalf("restored clock %d, want 2000000", got)
	}
	for _, fsm := range []*FSM{f, restored} {
		r := applyAll(t, fsm, consume("p1", "s", 500_000, "device", "d-1"))[0]
		if r.Err == nil || !strings.Contains(r.Err.Error(), "expired") {
			t.Fatalf("a code expired by the cluster clock was consumed with an earlier time: %v", r.Err)
		}
		if m, ok := fsm.State().Member("device", "d-1"); ok {
			t.Fatalf("member added: %+v", m)
		}
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// An operator's key-value write is journaled at the leader's time, never
// before the cluster clock (an API node with a clock behind wrote
// backwards times into the hash chain); a job's write carries no time.
func TestOperatorKVWritesAreJournaledOnTheClusterClock(t *testing.T) {
	put := &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", Value: []byte("v"), By: "device:d-1", AtMs: 5_000}}}
	if got := stampLeaderTime(put, 9_000).GetKvPut().AtMs; got != 9_000 {
		t.Fatalf("stamped %d, want the leader's 9000", got)
	}
	if jobs := commandTimes(&raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: "k", JobId: "j"}}}); len(jobs) != 0 {
		t.Fatalf("a job's write has times %v", jobs)
	}
	f := NewFSM()
	applyAll(t, f, useToken("t", 2_000_000), put,
		&raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{Key: "k", By: "device:d-1", AtMs: 1_000}}})
	recs, _, _, _ := f.State().Journal(0, 0, 100)
	var n int
	for _, r := range recs {
		if r.Action == "kv.put" || r.Action == "kv.delete" {
			n++
			if r.AtMs < 2_000_000 {
				t.Errorf("%s journaled at %d, before the cluster clock", r.Action, r.AtMs)
			}
		}
	}
	if n != 2 {
		t.Fatalf("journaled %d key-value writes, want 2", n)
	}
}
