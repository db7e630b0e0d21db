package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Many submits at once through a follower are group-committed (far fewer
// entries than commands) and each caller still gets its own outcome: its
// own job, or its own refusal (a resubmitted id with other content
// conflicts; the others in its batch are accepted). Through the leader
// they are not batched (raft writes them together anyway) and each gets
// its own outcome too.
func TestGroupCommitKeepsEachOutcome(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	leader := leaderOf(t, nodes)
	follower := others(nodes, leader)[0]
	if _, err := leader.cl.Apply(ctxFor(t, 10*time.Second), submit("taken")); err != nil {
		t.Fatal(err)
	}
	for _, via := range []*tnode{follower, leader} {
		const n = 200
		before := leader.store.Raft().LastIndex()
		var wg sync.WaitGroup
		jobs := make([]consensus.Job, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := submit(fmt.Sprintf("%s-%d", via.id, i))
				if i%50 == 7 { // an id already taken, with other content
					cmd = submit("taken")
					cmd.GetSubmitJob().Job.Input = []byte(fmt.Sprint("other ", i))
				}
				jobs[i], errs[i] = via.cl.Apply(ctxFor(t, 20*time.Second), cmd)
			}()
		}
		wg.Wait()
		entries := leader.store.Raft().LastIndex() - before
		for i := range n {
			if i%50 == 7 {
				if !errors.Is(errs[i], consensus.ErrConflict) {
					t.Fatalf("via %s: the resubmitted id answered %v, want a conflict", via.id, errs[i])
				}
				continue
			}
			if want := fmt.Sprintf("%s-%d", via.id, i); errs[i] != nil || jobs[i].ID != want || jobs[i].Phase != consensus.PhaseQueued {
				t.Fatalf("via %s: submit %d answered %q %v (%v); want its own job, queued", via.id, i, jobs[i].ID, jobs[i].Phase, errs[i])
			}
		}
		if via != leader && entries >= n/2 {
			t.Fatalf("via follower %s: %d submits at once took %d entries; want them grouped", via.id, n, entries)
		}
		if via == leader && entries < n {
			t.Fatalf("via the leader: %d submits took %d entries; the leader's own commands are not batched", n, entries)
		}
		if err := follower.cl.VerifyRead(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, ok := follower.store.State().Job(fmt.Sprintf("%s-%d", via.id, i)); !ok && i%50 != 7 {
				t.Fatalf("via %s: job %d missing from a replica", via.id, i)
			}
		}
		t.Logf("via %s: %d submits in %d entries", via.id, n, entries)
	}
}

// A forwarded batch is checked command by command: a node may not slip
// another node's result (or a placement) into a batch, and a batch may
// carry only batchable commands.
func TestForwardedBatchIsCheckedPerCommand(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	leader := leaderOf(t, nodes)
	from := identity.Principal{Kind: identity.KindNode, ID: others(nodes, leader)[0].id}
	result := func(node string) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_FinishBatch{FinishBatch: &raftpb.FinishBatch{Results: []*raftpb.FinishJob{{Id: "x", Attempt: 1, NodeId: node}}}}}
	}
	for name, tc := range map[string]struct {
		cmds []*raftpb.Command
		code string
	}{
		"another node's result": {[]*raftpb.Command{submit("ok-1"), result("someone-else")}, codePermissionDenied},
		"a placement":           {[]*raftpb.Command{submit("ok-2"), {Cmd: &raftpb.Command_AssignJob{AssignJob: &raftpb.AssignJob{Id: "ok-2", Attempt: 1, NodeId: from.ID}}}}, codeInvalid},
		"a nested batch":        {[]*raftpb.Command{{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: []*raftpb.Command{submit("ok-3")}}}}}, codeInvalid},
		"nothing":               {nil, codeInvalid},
	} {
		resp := leader.cl.handleForwardApply(ctxFor(t, 10*time.Second), from, &peerpb.ForwardApplyRequest{Command: &raftpb.Command{
			Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: tc.cmds}}}})
		if resp.GetError().GetCode() != tc.code {
			t.Fatalf("%s: answered %v, want %s", name, resp, tc.code)
		}
	}
	for _, id := range []string{"ok-1", "ok-2", "ok-3"} {
		if _, ok := leader.store.State().Job(id); ok {
			t.Fatalf("job %s of a refused batch was committed", id)
		}
	}
	// The node's own result in a batch is fine.
	resp := leader.cl.handleForwardApply(ctxFor(t, 10*time.Second), from, &peerpb.ForwardApplyRequest{Command: &raftpb.Command{
		Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: []*raftpb.Command{submit("ok-4"), result(from.ID)}}}}})
	if resp.GetError() != nil || len(resp.GetForwardApply().GetResults()) != 2 || resp.GetForwardApply().Results[0].GetJob().GetId() != "ok-4" {
		t.Fatalf("a batch of a submit and the node's own result: %v", resp)
	}
}

// A caller that gives up while its command still waits in the queue
// takes it out: it is never proposed.
func TestGivingUpBeforeSendingProposesNothing(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	leader := leaderOf(t, nodes)
	n := others(nodes, leader)[0] // followers batch
	b := &n.cl.batch
	b.mu.Lock()
	b.flights = maxFlights // as if every flight were under way: nothing flushes
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := n.cl.Apply(ctx, submit("abandoned")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("gave up while queued: %v, want the deadline", err)
	}
	b.mu.Lock()
	queued := len(b.queue)
	b.flights = 0
	b.mu.Unlock()
	if queued != 0 {
		t.Fatalf("%d commands left in the queue after their callers gave up", queued)
	}
	if _, err := n.cl.Apply(ctxFor(t, 10*time.Second), submit("next")); err != nil {
		t.Fatal(err)
	}
	if err := n.cl.VerifyRead(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.store.State().Job("abandoned"); ok {
		t.Fatal("a command whose caller gave up before it was sent was committed")
	}
}

// While a member runs an older version (it does not advertise
// FeatureBatch), no CommandBatch is committed, neither by a node's own
// batcher nor by the leader for a forwarded batch: every command gets an
// entry of its own, and still its own outcome.
func TestNoBatchWhileAMemberIsOlder(t *testing.T) {
	nodes := olderThird(t)
	leader := leaderOf(t, nodes)
	eventually(t, 10*time.Second, "everyone to see the old node's features", func() error {
		for _, n := range nodes {
			if n.cl.canBatch() {
				return fmt.Errorf("%s would batch", n.id)
			}
			// Nor may numbered key-value writes or a tool's own grants be
			// used: the old node would apply them differently.
			for _, f := range []string{FeatureKVRun, FeatureToolGrants} {
				if n.cl.AllSupport(f) {
					return fmt.Errorf("%s would use %s", n.id, f)
				}
			}
		}
		return nil
	})
	via := others(nodes, leader)[0]
	const n = 60
	before := leader.store.Raft().LastIndex()
	var wg sync.WaitGroup
	errs := make([]error, n)
	jobs := make([]consensus.Job, n)
	for i := range n {
		wg.Go(func() { jobs[i], errs[i] = via.cl.Apply(ctxFor(t, 20*time.Second), submit(fmt.Sprint("mixed-", i))) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || jobs[i].ID != fmt.Sprint("mixed-", i) {
			t.Fatalf("submit %d in a mixed cluster: %q %v", i, jobs[i].ID, errs[i])
		}
	}
	if entries := leader.store.Raft().LastIndex() - before; entries < n {
		t.Fatalf("%d submits took %d entries with an older member: some were batched", n, entries)
	}
	// A batch forwarded anyway (by a node whose view lagged) is applied
	// one command at a time by the leader.
	before = leader.store.Raft().LastIndex()
	from := identity.Principal{Kind: identity.KindNode, ID: via.id}
	resp := leader.cl.handleForwardApply(ctxFor(t, 10*time.Second), from, &peerpb.ForwardApplyRequest{Command: &raftpb.Command{
		Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: []*raftpb.Command{submit("f-1"), submit("f-2"), submit("mixed-0")}}}}})
	rs := resp.GetForwardApply().GetResults()
	if resp.GetError() != nil || len(rs) != 3 || rs[0].GetJob().GetId() != "f-1" || rs[1].GetJob().GetId() != "f-2" || rs[2].GetJob().GetId() != "mixed-0" {
		t.Fatalf("forwarded batch in a mixed cluster answered %v", resp)
	}
	if entries := leader.store.Raft().LastIndex() - before; entries < 3 {
		t.Fatalf("a forwarded batch of 3 took %d entries with an older member", entries)
	}
}

// A raft server this node never heard from in gossip (down since it
// started) counts as older for AllSupport (batches, tool grants), not for
// SeenSupport (numbered key-value writes): a node restarted after a peer
// died never hears of it, and its jobs' writes went unnumbered, failing
// for good on a leader's loss.
func TestSeenSupportLeavesOutServersNeverHeardFrom(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	me, gone := nodes[0], nodes[2]
	if !me.cl.AllSupport(FeatureKVRun) || !me.cl.SeenSupport(FeatureKVRun) || len(me.cl.Lacking(FeatureKVRun)) != 0 {
		t.Fatal("a cluster of this version does not support its own features")
	}
	gone.stop()
	eventually(t, 20*time.Second, "the stopped node seen dead", func() error {
		for _, m := range me.cl.Members() {
			if m.ID == gone.id && m.State == StateDead {
				return nil
			}
		}
		return errors.New("not dead yet")
	})
	me.cl.mu.Lock()
	delete(me.cl.members, gone.id) // as on a node that started after it died
	me.cl.mu.Unlock()
	if me.cl.AllSupport(FeatureKVRun) {
		t.Error("AllSupport counts a raft server never heard from as supporting")
	}
	if l := me.cl.Lacking(FeatureKVRun); !slices.Equal(l, []string{gone.id}) {
		t.Errorf("Lacking names %v, want the server never heard from, %s", l, gone.id)
	}
	if !me.cl.SeenSupport(FeatureKVRun) {
		t.Error("SeenSupport refuses because of a raft server never heard from")
	}
}
