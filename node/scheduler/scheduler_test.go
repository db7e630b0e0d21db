package scheduler

import (
	"fmt"
	"reflect"
	"testing"
)

func node(id string, slots, running int, labels map[string]string) Node {
	return Node{ID: id, Eligible: true, Slots: map[string]int{"wasm": slots}, Running: map[string]int{"wasm": running}, Labels: labels}
}

func TestPlanRespectsCapacityAndSpreads(t *testing.T) {
	nodes := []Node{node("b", 2, 0, nil), node("a", 2, 1, nil)}
	var jobs []Job
	for i := 0; i < 5; i++ {
		jobs = append(jobs, Job{ID: fmt.Sprintf("j%d", i), Kind: "wasm", Order: uint64(i)})
	}
	plan, unplaced := Plan(nodes, jobs)
	if len(plan) != 3 || len(unplaced) != 2 {
		t.Fatalf("plan %v unplaced %v", plan, unplaced)
	}
	per := map[string]int{}
	for _, p := range plan {
		per[p.NodeID]++
		if p.Attempt != 1 {
			t.Fatalf("attempt %d", p.Attempt)
		}
	}
	if per["a"] != 1 || per["b"] != 2 {
		t.Fatalf("spread %v", per)
	}
	if plan[0].JobID != "j0" || plan[0].NodeID != "b" {
		t.Fatalf("first placement %v: want j0 on the freest node b", plan[0])
	}
	// Deterministic: same input, same plan.
	again, _ := Plan(nodes, jobs)
	if !reflect.DeepEqual(plan, again) {
		t.Fatal("plan not deterministic")
	}
	// Input not mutated.
	if nodes[1].Running["wasm"] != 1 {
		t.Fatal("Plan mutated its input")
	}
}

func TestPlanPriorityConstraintsEligibility(t *testing.T) {
	nodes := []Node{node("gpu", 1, 0, map[string]string{"zone": "x"}), node("cpu", 1, 0, nil)}
	nodes[1].Eligible = false
	jobs := []Job{
		{ID: "low", Kind: "wasm", Order: 1},
		{ID: "high", Kind: "wasm", Order: 2, Priority: 5, Attempt: 2},
		{ID: "pinned", Kind: "wasm", Order: 3, Constraints: map[string]string{"zone": "y"}},
		{ID: "browser", Kind: "browser", Order: 4},
	}
	plan, unplaced := Plan(nodes, jobs)
	if len(plan) != 1 || plan[0] != (Placement{JobID: "high", NodeID: "gpu", Attempt: 3}) {
		t.Fatalf("plan %v", plan)
	}
	reasons := map[string]string{}
	for _, u := range unplaced {
		reasons[u.JobID] = u.Reason
	}
	if reasons["pinned"] != "no eligible node offers wasm capacity matching zone=y" {
		t.Fatalf("pinned reason %q", reasons["pinned"])
	}
	if reasons["low"] != "all matching nodes are busy; it runs when a slot frees" {
		t.Fatalf("low reason %q", reasons["low"])
	}
	if reasons["browser"] == "" {
		t.Fatal("browser job should be unplaced")
	}
}

// Jobs arriving one at a time on an idle cluster spread over the nodes.
func TestSequentialJobsSpread(t *testing.T) {
	nodes := []Node{node("a", 4, 0, nil), node("b", 4, 0, nil), node("c", 4, 0, nil)}
	per := map[string]int{}
	for i := 0; i < 300; i++ {
		plan, _ := Plan(nodes, []Job{{ID: fmt.Sprintf("j-%d", i), Kind: "wasm"}})
		per[plan[0].NodeID]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if per[n] < 60 {
			t.Fatalf("placements %v: node %s starved", per, n)
		}
	}
}

// Jobs of one kind share a node's count whatever their depth: deep jobs
// placed first leave a shallow one no room, and the other way round the
// shallow one takes its place before the deep ones fill the rest. A job
// left without room caps the depth of the jobs after it on its nodes: no
// deeper job overtakes it.
func TestDepthsShareOneCount(t *testing.T) {
	nodes := []Node{node("a", 2, 1, nil)} // 2 slots, 1 held
	jobs := []Job{
		{ID: "deep1", Kind: "wasm", Order: 1, Depth: 3}, // capacity 8
		{ID: "deep2", Kind: "wasm", Order: 2, Depth: 3},
		{ID: "shallow", Kind: "wasm", Order: 3}, // capacity 2: 1 held + 2 placed above
		{ID: "deep3", Kind: "wasm", Order: 4, Depth: 3},
	}
	ids := func(plan []Placement) (out []string) {
		for _, p := range plan {
			out = append(out, p.JobID)
		}
		return out
	}
	uids := func(un []Unplaced) (out []string) {
		for _, u := range un {
			out = append(out, u.JobID)
		}
		return out
	}
	plan, unplaced := Plan(nodes, jobs)
	if !reflect.DeepEqual(ids(plan), []string{"deep1", "deep2"}) || !reflect.DeepEqual(uids(unplaced), []string{"shallow", "deep3"}) {
		t.Fatalf("plan %v unplaced %v: want the shallow job left out (the deep ones filled its room), and deep3 not past it", ids(plan), uids(unplaced))
	}
	jobs[2].Order = 0 // now first: it takes the last place of its depth
	plan, _ = Plan(nodes, jobs)
	if len(plan) != 4 || plan[0].JobID != "shallow" {
		t.Fatalf("plan %v: want the shallow job first, then the three deep ones", ids(plan))
	}
	// 1 held + 4 placed: a job at depth 1 (capacity 4) finds no room, and
	// the deep job after it (room at depth 3) does not pass it.
	more := append(jobs, Job{ID: "d1", Kind: "wasm", Order: 9, Depth: 1}, Job{ID: "deep4", Kind: "wasm", Order: 10, Depth: 3})
	plan, unplaced = Plan(nodes, more)
	if len(plan) != 4 || !reflect.DeepEqual(uids(unplaced), []string{"d1", "deep4"}) {
		t.Fatalf("plan %v unplaced %v: want d1 and deep4 left out", ids(plan), uids(unplaced))
	}
	// A job of another kind, or one no node matches, caps nothing.
	other := append(jobs[:2:2], Job{ID: "nowhere", Kind: "wasm", Order: 3, Constraints: map[string]string{"zone": "x"}},
		Job{ID: "b", Kind: "browser", Order: 4}, Job{ID: "deep3", Kind: "wasm", Order: 5, Depth: 3})
	plan, _ = Plan(nodes, other)
	if !reflect.DeepEqual(ids(plan), []string{"deep1", "deep2", "deep3"}) {
		t.Fatalf("plan %v: want every deep job placed", ids(plan))
	}
}
