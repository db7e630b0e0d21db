package scheduler

import (
	"fmt"
	"testing"
)

// BenchmarkPlan10kNodes places 5,000 queued jobs (with labels, constraints
// and priorities) on 10,000 simulated nodes per iteration and reports
// placements per second.
func BenchmarkPlan10kNodes(b *testing.B) {
	const nNodes, nJobs = 10_000, 5_000
	nodes := make([]Node, nNodes)
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("n-%05d", i), Eligible: i%50 != 0,
			Slots:   map[string]int{"wasm": 4 + i%4, "browser": i % 3},
			Running: map[string]int{"wasm": i % 3},
			Labels:  map[string]string{"zone": fmt.Sprintf("z%d", i%8)}}
	}
	jobs := make([]Job, nJobs)
	for i := range jobs {
		jobs[i] = Job{ID: fmt.Sprintf("j-%05d", i), Kind: "wasm", Order: uint64(i), Priority: i % 3}
		if i%5 == 0 {
			jobs[i].Constraints = map[string]string{"zone": fmt.Sprintf("z%d", i%8)}
		}
		if i%11 == 0 {
			jobs[i].Kind = "browser"
		}
	}
	b.ResetTimer()
	placed := 0
	for i := 0; i < b.N; i++ {
		plan, _ := Plan(nodes, jobs)
		placed += len(plan)
	}
	b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
}
