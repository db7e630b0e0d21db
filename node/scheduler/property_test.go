package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Random clusters and queues: every plan respects capacity (jobs of one
// kind share a node's count whatever their depth), eligibility and
// constraints; never leaves a job unplaced while a matching node still
// has room at its depth; and never places a lower-priority job of a group
// while a higher-priority one of the same group waits.
func TestPlanProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	kinds := []string{"wasm", "browser"}
	for round := 0; round < 300; round++ {
		nodes := make([]Node, 1+r.IntN(30))
		for i := range nodes {
			nodes[i] = Node{ID: fmt.Sprintf("n%02d", i), Eligible: r.IntN(6) != 0,
				Slots:   map[string]int{"wasm": r.IntN(4), "browser": r.IntN(2)},
				Running: map[string]int{"wasm": r.IntN(3)},
				Labels:  map[string]string{"zone": fmt.Sprint(r.IntN(3))}}
		}
		jobs := make([]Job, r.IntN(60))
		for i := range jobs {
			jobs[i] = Job{ID: fmt.Sprintf("j%03d", i), Kind: kinds[r.IntN(2)], Order: uint64(i), Priority: r.IntN(3)}
			if r.IntN(2) == 0 {
				jobs[i].Depth = r.IntN(4)
			}
			if r.IntN(3) == 0 {
				jobs[i].Constraints = map[string]string{"zone": fmt.Sprint(r.IntN(4))}
			}
		}
		plan, unplaced := Plan(nodes, jobs)
		byID := map[string]*Node{}
		for i := range nodes {
			byID[nodes[i].ID] = &nodes[i]
		}
		jobByID := map[string]Job{}
		for _, j := range jobs {
			jobByID[j.ID] = j
		}
		used := map[string]map[string]int{}
		placedJob := map[string]bool{}
		for _, p := range plan {
			j, n := jobByID[p.JobID], byID[p.NodeID]
			if placedJob[p.JobID] {
				t.Fatalf("round %d: %s placed twice", round, p.JobID)
			}
			placedJob[p.JobID] = true
			if !n.Eligible || !Matches(n.Labels, j.Constraints) || n.Slots[j.Kind] == 0 {
				t.Fatalf("round %d: %s on ineligible or non-matching %s", round, j.ID, n.ID)
			}
			if used[n.ID] == nil {
				used[n.ID] = map[string]int{}
			}
			used[n.ID][j.Kind]++
			if used[n.ID][j.Kind] > n.free(j.Kind, j.Depth) {
				t.Fatalf("round %d: %s over capacity for %s at depth %d", round, n.ID, j.Kind, j.Depth)
			}
		}
		if len(plan)+len(unplaced) != len(jobs) {
			t.Fatalf("round %d: %d placed + %d unplaced != %d jobs", round, len(plan), len(unplaced), len(jobs))
		}
		for _, u := range unplaced {
			j := jobByID[u.JobID]
			for i := range nodes {
				n := &nodes[i]
				if n.Eligible && n.Slots[j.Kind] > 0 && Matches(n.Labels, j.Constraints) && n.free(j.Kind, j.Depth)-used[n.ID][j.Kind] > 0 {
					t.Fatalf("round %d: %s unplaced (%s) while %s has a free %s slot", round, j.ID, u.Reason, n.ID, j.Kind)
				}
			}
			for _, p := range plan {
				o := jobByID[p.JobID]
				if o.Kind == j.Kind && o.Depth == j.Depth && constraintText(o.Constraints) == constraintText(j.Constraints) && o.Priority < j.Priority {
					t.Fatalf("round %d: lower-priority %s placed while %s waits", round, o.ID, j.ID)
				}
			}
		}
	}
}
