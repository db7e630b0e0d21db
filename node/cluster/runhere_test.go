package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// runHere is a RunHere of job id run on node.
func runHere(id, node string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{
		Submit: submit(id).GetSubmitJob(), NodeId: node, PlacedAtMs: 1,
		Finish: &raftpb.FinishJob{Ok: true, Stdout: []byte("ran"), AtMs: 2}}}}
}

// addNodeMember records node id as a member (the FSM places work only on
// members).
func addNodeMember(t *testing.T, via *tnode, id string) {
	t.Helper()
	cmd := &raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: id}}}}
	if _, err := via.cl.Apply(ctxFor(t, 10*time.Second), cmd); err != nil {
		t.Fatal(err)
	}
}

// A job run where it was submitted is recorded with its result in one
// entry, whether the node leads or forwards it; while a member runs an
// older version (it could not apply the entry), the leader submits the
// job as usual instead: it is queued, its run dropped.
func TestRunHereEntriesAndOlderMembers(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	leader := leaderOf(t, nodes)
	for i, n := range nodes {
		addNodeMember(t, leader, n.id)
		j, err := n.cl.Apply(ctxFor(t, 10*time.Second), runHere(fmt.Sprint("here-", i), n.id))
		if err != nil || j.Phase != consensus.PhaseCompleted || j.NodeID != n.id || string(j.Stdout) != "ran" {
			t.Fatalf("RunHere through %s (leader %v): %+v %v", n.id, n == leader, j, err)
		}
	}

	mixed := olderThird(t)
	leader = leaderOf(t, mixed)
	eventually(t, 10*time.Second, "everyone to see the old node's features", func() error {
		for _, n := range mixed {
			if n.cl.AllSupport(FeatureRunHere) {
				return fmt.Errorf("%s would record jobs run here", n.id)
			}
		}
		return nil
	})
	for i, n := range mixed {
		addNodeMember(t, leader, n.id)
		j, err := n.cl.Apply(ctxFor(t, 10*time.Second), runHere(fmt.Sprint("mixed-", i), n.id))
		if err != nil || j.Phase != consensus.PhaseQueued || j.Attempt != 0 || len(j.Stdout) != 0 {
			t.Fatalf("RunHere through %s with an older member: %+v %v; want it queued", n.id, j, err)
		}
	}
}

// withoutRunHere keeps every other command of a batch and its order.
func TestWithoutRunHere(t *testing.T) {
	b := &raftpb.Command{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: []*raftpb.Command{
		submit("a"), runHere("b", "n1"), submit("c")}}}}
	if !hasRunHere(b) || hasRunHere(submit("x")) {
		t.Fatal("hasRunHere")
	}
	out := withoutRunHere(b).GetBatch().GetCommands()
	if len(out) != 3 || out[0].GetSubmitJob().GetJob().GetId() != "a" || out[1].GetSubmitJob().GetJob().GetId() != "b" ||
		out[2].GetSubmitJob().GetJob().GetId() != "c" || hasRunHere(withoutRunHere(b)) {
		t.Fatalf("withoutRunHere: %v", out)
	}
	if one := withoutRunHere(runHere("d", "n1")); one.GetSubmitJob().GetJob().GetId() != "d" {
		t.Fatalf("a lone RunHere: %v", one)
	}
}

// A node the policy does not let record a job it ran (worker.report on
// the job, judged on its submission) has the job submitted as usual, its
// run dropped; the other commands of its batch stand.
func TestRunHereRefusedByThePolicyIsSubmitted(t *testing.T) {
	nodes := []*tnode{newNode(t, 3), newNode(t, 3)}
	refusedKind := ""
	nodes[0].nodeWorkOn = func(pr identity.Principal, action, jobID, submitter, kind string) error {
		if action == policy.ActionWorkerReport && kind == "wasm" && pr.ID == nodes[1].id {
			refusedKind = kind
			return errors.New("forbidden by the test's policy")
		}
		return nil
	}
	nodes[0].start(true)
	nodes[1].start(false)
	nodes[1].join(nodes[0])
	eventually(t, 20*time.Second, "a voter and a non-voter", func() error { return converged(nodes, 1, 1) })
	leader := leaderOf(t, nodes) // the first: the only voter, whose policy is the test's
	addNodeMember(t, leader, nodes[1].id)
	from := identity.Principal{Kind: identity.KindNode, ID: nodes[1].id}
	resp := leader.cl.handleForwardApply(ctxFor(t, 10*time.Second), from, &peerpb.ForwardApplyRequest{Command: &raftpb.Command{
		Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: []*raftpb.Command{submit("plain"), runHere("ran", nodes[1].id)}}}}})
	rs := resp.GetForwardApply().GetResults()
	if resp.GetError() != nil || len(rs) != 2 || rs[0].GetJob().GetId() != "plain" || rs[1].GetJob().GetId() != "ran" {
		t.Fatalf("forwarded batch: %v", resp)
	}
	if j, ok := leader.store.State().Job("ran"); !ok || j.Phase != consensus.PhaseQueued || j.Attempt != 0 || refusedKind != "wasm" {
		t.Fatalf("the refused run's job: %+v (found %v, judged kind %q); want it queued, judged as wasm", j, ok, refusedKind)
	}
}
