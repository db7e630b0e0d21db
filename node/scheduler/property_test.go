package scheduler

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// Random clusters and queues: every plan respects capacity (jobs of one
// kind share a node's count whatever their depth), eligibility and
// constraints; never leaves a job unplaced while a matching node still
// has room at its depth; and never lets a job pass an earlier (higher
// priority, or accepted before) job left waiting: on the nodes that one
// matches, no later job gets a deeper place than it would have had.
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
		if len(plan)+len(unplaced) != len(jobs) {
			t.Fatalf("round %d: %d placed + %d unplaced != %d jobs", round, len(plan), len(unplaced), len(jobs))
		}
		byID := map[string]*Node{}
		for i := range nodes {
			byID[nodes[i].ID] = &nodes[i]
		}
		placedOn := map[string]string{}
		for _, p := range plan {
			if _, dup := placedOn[p.JobID]; dup {
				t.Fatalf("round %d: %s placed twice", round, p.JobID)
			}
			placedOn[p.JobID] = p.NodeID
		}
		// Replay the jobs in the planner's order (priority, then order),
		// with each node's count and depth cap as they stood.
		order := append([]Job(nil), jobs...)
		sort.SliceStable(order, func(a, b int) bool {
			if order[a].Priority != order[b].Priority {
				return order[a].Priority > order[b].Priority
			}
			return order[a].Order < order[b].Order
		})
		used := map[[2]string]int{}
		capAt := map[[2]string]int{}
		room := func(n *Node, j Job) bool {
			k := [2]string{n.ID, j.Kind}
			depth := j.Depth
			if c, ok := capAt[k]; ok {
				depth = min(depth, c)
			}
			return n.Running[j.Kind]+used[k] < n.Capacity(j.Kind, depth)
		}
		fits := func(n *Node, j Job) bool {
			return n.Eligible && n.Slots[j.Kind] > 0 && Matches(n.Labels, j.Constraints)
		}
		for _, j := range order {
			if id, ok := placedOn[j.ID]; ok {
				n := byID[id]
				if !fits(n, j) {
					t.Fatalf("round %d: %s on ineligible or non-matching %s", round, j.ID, n.ID)
				}
				if !room(n, j) {
					t.Fatalf("round %d: %s placed on %s past its capacity at depth %d (or past a waiting job's depth cap %v)",
						round, j.ID, n.ID, j.Depth, capAt)
				}
				used[[2]string{n.ID, j.Kind}]++
				continue
			}
			// Unplaced: no matching node had room for it then; it caps
			// the depth behind it on the nodes it matches.
			for i := range nodes {
				n := &nodes[i]
				if fits(n, j) && room(n, j) {
					t.Fatalf("round %d: %s unplaced while %s had room for it", round, j.ID, n.ID)
				}
			}
			for i := range nodes {
				if n := &nodes[i]; fits(n, j) {
					k := [2]string{n.ID, j.Kind}
					if c, ok := capAt[k]; !ok || j.Depth < c {
						capAt[k] = j.Depth
					}
				}
			}
		}
	}
}
