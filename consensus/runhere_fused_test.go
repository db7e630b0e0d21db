package consensus

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/btree"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// refRunHere is a RunHere applied as its three commands: the submission,
// the placement as attempt 1 on the node, the result, each stored with
// its indexes (what applyRunHere did before it stored the job once).
func refRunHere(s *State, index uint64, c *raftpb.RunHere) ApplyResult {
	sub := s.applySubmit(index, c.GetSubmit())
	if sub.Err != nil || sub.Job.CommitIndex != index || sub.Job.Phase != PhaseQueued || c.GetFinish() == nil {
		return sub
	}
	j := sub.Job
	if !MayRunBeforeAcceptance(c.Submit.Job) {
		return sub
	}
	m, ok := s.id.members["node:"+c.NodeId]
	if !ok || m.Revoked || m.Ineligible || m.Draining {
		return sub
	}
	if r := s.applyAssign(&raftpb.AssignJob{Id: j.ID, Attempt: 1, NodeId: c.NodeId, AtMs: max(c.PlacedAtMs, j.SubmittedAtMS)}, 0); r.Err != nil {
		return sub
	}
	fin := c.Finish
	fin.Id, fin.Attempt, fin.NodeId, fin.EndedOutput = j.ID, 1, c.NodeId, false
	return s.applyFinish(fin)
}

// digest spells out a state's indexes over its jobs, empty trees and
// maps left out.
func digest(s *State) string {
	var b strings.Builder
	ids := func(name string, t *btree.BTreeG[*Job]) {
		var out []string
		t.Ascend(func(j *Job) bool { out = append(out, j.ID); return true })
		if len(out) > 0 {
			fmt.Fprintf(&b, "%s: %v\n", name, out)
		}
	}
	x := &s.idx
	ids("order", x.order)
	for _, p := range orderedKeys((x.byPhase)) {
		ids(fmt.Sprint("phase ", p), x.byPhase[p])
	}
	for _, n := range orderedKeys((x.byNode)) {
		ids("node "+n, x.byNode[n])
	}
	for _, k := range orderedKeys((x.queue)) {
		ids("queue "+k, x.queue[k])
	}
	for _, n := range orderedKeys((x.running)) {
		fmt.Fprintf(&b, "running %s: %v\n", n, orderedKeys((x.running[n])))
	}
	x.ended.Ascend(func(k timeKey) bool { fmt.Fprintf(&b, "ended %d %s\n", k.at, k.id); return true })
	x.deadlines.Ascend(func(k timeKey) bool { fmt.Fprintf(&b, "deadline %d %s\n", k.at, k.id); return true })
	for _, p := range orderedKeys((x.phases)) {
		if x.phases[p] != 0 {
			fmt.Fprintf(&b, "count %s %d\n", p, x.phases[p])
		}
	}
	fmt.Fprintf(&b, "prunable %d\nblobs %v\nmodules %v\nidempotency %v\n", x.prunable, x.blobRefs, x.modules, s.idempotency)
	return b.String() // the jobs themselves: compared deeply by the test
}

func orderedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A RunHere stores the job once, as it ends; the state it leaves (the job,
// every index, the answer) is the one its three commands leave, for runs
// that complete, fail, are retried, repeat an earlier submission, reuse
// an idempotency key, come from a node that takes no work, or name a job
// that must wait for approval.
func TestRunHereAsItsThreeCommands(t *testing.T) {
	setup := []*raftpb.Command{addNode("n1"), addNode("n2"), addNode("n3"),
		{Cmd: &raftpb.Command_SetNodeSchedulable{SetNodeSchedulable: &raftpb.SetNodeSchedulable{Id: "n3", Eligible: true, Draining: true}}},
		submit("waiting")}
	key := func(k string) func(*raftpb.JobRecord) {
		return func(r *raftpb.JobRecord) { r.IdempotencyKey = k; r.PayloadHash = []byte(k) }
	}
	blobOut := &raftpb.FinishJob{Ok: true, StdoutSha256: strings.Repeat("c", 64), StdoutSize: 1 << 20, AtMs: 30, RanUs: 4000}
	steps := []*raftpb.Command{
		runHereCmd("ok", "n1", 10, 12, nil, nil),
		runHereCmd("late-placement", "n2", 5, 12, func(r *raftpb.JobRecord) { r.SubmittedAtMs = 8 }, nil),
		runHereCmd("blob-out", "n1", 20, 30, nil, blobOut),
		runHereCmd("failed", "n2", 20, 25, nil, &raftpb.FinishJob{Ok: false, Error: &raftpb.Error{Code: "trap", Message: "x"}, AtMs: 25}),
		runHereCmd("retried", "n1", 20, 26, func(r *raftpb.JobRecord) { r.MaxRetries = 2 },
			&raftpb.FinishJob{Ok: false, Retryable: true, Error: &raftpb.Error{Code: "exit_code", Message: "boom"}, AtMs: 26}),
		runHereCmd("no-error", "n2", 20, 27, nil, &raftpb.FinishJob{Ok: false, AtMs: 27}),
		runHereCmd("ok", "n1", 10, 12, nil, nil), // the same entry again
		runHereCmd("keyed", "n1", 30, 31, key("dev/a"), nil),
		runHereCmd("keyed-again", "n2", 30, 33, key("dev/a"), nil),
		runHereCmd("draining-node", "n3", 40, 41, nil, nil),
		runHereCmd("unknown-node", "n9", 40, 41, nil, nil),
		runHereCmd("approval", "n1", 40, 41, func(r *raftpb.JobRecord) { r.RequiresApproval = true; r.DeadlineAtMs = 9000 }, nil),
		runHereCmd("approval-no-expiry", "n1", 40, 41, func(r *raftpb.JobRecord) { r.RequiresApproval = true }, nil),
		runHereCmd("granted", "n1", 40, 41, func(r *raftpb.JobRecord) { r.AllowHosts = []string{"example.com"} }, nil),
		runHereCmd("no-result", "n1", 40, 41, nil, nil),
		runHereCmd("waiting", "n1", 50, 51, nil, nil), // an id taken by a queued job
		{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{NodeId: "n1"}}},
	}
	steps[14].GetRunHere().Finish = nil
	fused, ref := NewFSM(), NewFSM()
	applyAll(t, fused, setup...)
	applyAll(t, ref, setup...)
	index := fused.State().AppliedIndex()
	for i, c := range steps {
		index++
		a := proto.Clone(c).(*raftpb.Command).GetRunHere()
		b := proto.Clone(c).(*raftpb.Command).GetRunHere()
		fused.state.mu.Lock()
		got := fused.state.applyRunHere(index, a)
		fused.state.mu.Unlock()
		ref.state.mu.Lock()
		want := refRunHere(ref.state, index, b)
		ref.state.mu.Unlock()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d (%s): answered %+v, the three commands %+v", i, c.GetRunHere().GetSubmit().GetJob().GetId(), got, want)
		}
		if !reflect.DeepEqual(fused.state.jobs, ref.state.jobs) {
			t.Fatalf("step %d (%s): jobs differ from the three commands'", i, c.GetRunHere().GetSubmit().GetJob().GetId())
		}
		if dg, dw := digest(fused.state), digest(ref.state); dg != dw {
			t.Fatalf("step %d (%s): state\n%s\nthe three commands leave\n%s", i, c.GetRunHere().GetSubmit().GetJob().GetId(), dg, dw)
		}
	}
	for _, id := range []string{"ok", "blob-out", "failed", "retried", "draining-node", "approval"} {
		if _, ok := fused.State().Job(id); !ok {
			t.Errorf("job %s is missing: the scenario did not run as meant", id)
		}
	}
}
