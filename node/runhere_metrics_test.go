package node

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A run made here counts as a worker run only once its entry recorded
// it: a dropped one (the node stopped taking work meanwhile, the job
// queued for the scheduler) runs again elsewhere, and that run counts.
// The worker used to count every run it made here.
func TestRunHereCountsOnlyRecordedRuns(t *testing.T) {
	n := &Node{}
	n.metrics = newNodeMetrics(n)
	run := &raftpb.RunHere{
		Submit: &raftpb.SubmitJob{Job: &raftpb.JobRecord{Id: "j-1", Kind: "wasm", SubmittedAtMs: 1}},
		Finish: &raftpb.FinishJob{Id: "j-1", Ok: true, RanUs: 300},
	}
	rh := runHere{n: n}
	rh.Recorded(run, false)
	if got := counterValue(t, n.metrics.runs.WithLabelValues("wasm", "completed")); got != 0 {
		t.Fatalf("a dropped run counted as %v worker runs", got)
	}
	if got := counterValue(t, n.metrics.runHere.WithLabelValues("dropped")); got != 1 {
		t.Fatalf("dropped runs: %v, want 1", got)
	}
	rh.Recorded(run, true)
	if got := counterValue(t, n.metrics.runs.WithLabelValues("wasm", "completed")); got != 1 {
		t.Fatalf("a recorded run counted as %v worker runs, want 1", got)
	}
	if got := counterValue(t, n.metrics.runHere.WithLabelValues("recorded")); got != 1 {
		t.Fatalf("recorded runs: %v, want 1", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
