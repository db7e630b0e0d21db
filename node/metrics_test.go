package node_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	gometrics "github.com/armon/go-metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A node started with MetricsListen serves valid Prometheus text at
// /metrics (parsed with the client library's parser) with raft's own
// metrics, job and certificate metrics; a non-loopback address is refused
// unless allowed.
func TestMetricsEndpoint(t *testing.T) {
	n := start(t, node.Config{MetricsListen: "127.0.0.1:0"})
	op := operator(t, n, n.Addr())
	// Three submitted and awaited in one call (run on this node at once:
	// one entry each), one submitted and then awaited (placed by the
	// scheduler, its result reported by the worker).
	for i := range 3 {
		j, err := op.Run(callCtx(t), &palyrav1.SubmitJobRequest{WasmModule: testwasm.Build(t, "reverse"), Input: []byte("abc")}, nil)
		if err != nil || j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
			t.Fatalf("job %d: %v %v", i, j, err)
		}
	}
	waitCompleted(t, op, submit(t, op, "abc"))
	resp, err := http.Get("http://" + n.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("not valid Prometheus text: %v\n%s", err, body)
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		f, ok := fams[name]
		if !ok {
			return 0, false
		}
	metrics:
		for _, m := range f.Metric {
			for k, v := range labels {
				found := false
				for _, l := range m.Label {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			case m.Summary != nil:
				return float64(m.Summary.GetSampleCount()), true
			}
		}
		return 0, false
	}
	checks := []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"palyra_raft_leader", nil, 1},
		{"palyra_raft_index", map[string]string{"index": "applied"}, 1},
		{"palyra_jobs", map[string]string{"phase": "completed"}, 4},
		{"palyra_jobs", map[string]string{"phase": "waiting_for_approval"}, 0}, // every phase has its series
		{"palyra_jobs", map[string]string{"phase": "paused"}, 0},
		{"palyra_group_commit_alone_total", nil, 5}, // 3 jobs run here, a submit and its result, one at a time
		{"palyra_group_commit_batches_total", nil, 0},
		{"palyra_worker_runs_total", map[string]string{"kind": "wasm", "result": "completed"}, 4},
		{"palyra_job_latency_seconds", map[string]string{"kind": "wasm"}, 4},
		{"palyra_jobs_run_here_total", map[string]string{"outcome": "recorded"}, 3},
		{"palyra_certificate_expiry_seconds", nil, 60},
		{"palyra_scheduler_placements_total", nil, 1},
		{"palyra_queue_depth", map[string]string{"kind": "wasm"}, 0},
	}
	for _, c := range checks {
		if v, ok := value(c.name, c.labels); !ok || v < c.min {
			t.Errorf("%s%v = %v (present %v), want ≥ %v", c.name, c.labels, v, ok, c.min)
		}
	}
	// raft's own metrics, bridged from go-metrics.
	raftOwn := 0
	for name := range fams {
		if strings.HasPrefix(name, "palyra_raft_") && !strings.HasPrefix(name, "palyra_raft_leader") && !strings.HasPrefix(name, "palyra_raft_index") &&
			name != "palyra_raft_term" && name != "palyra_raft_voters" {
			raftOwn++
		}
	}
	if raftOwn == 0 {
		t.Errorf("no metric of raft's own among %d families", len(fams))
	}

	if _, err := node.Start(context.Background(), node.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", MetricsListen: "0.0.0.0:9464"}); err == nil || !strings.Contains(err.Error(), "--metrics-allow-remote") {
		t.Fatalf("a non-loopback metrics address: %v", err)
	}
}

// --metrics-listen is recorded in the data dir, as --listen is: a restart
// without it serves /metrics on the same address again; MetricsOff stops
// serving and forgets it.
func TestMetricsListenIsRecorded(t *testing.T) {
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", BrowserSlots: -1, WasmSlots: 1, Fast: true,
		WasmCacheDir: sharedWasmCache, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	restart := func(metrics string) *node.Node {
		t.Helper()
		cfg.MetricsListen = metrics
		n, err := node.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listen = ""
		return n
	}
	n := restart("127.0.0.1:0")
	addr := n.MetricsAddr()
	n.Close()

	n = restart("")
	if n.MetricsAddr() != addr {
		t.Fatalf("restarted without MetricsListen: metrics at %q, want the recorded %s", n.MetricsAddr(), addr)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "palyra_") {
		t.Fatalf("GET /metrics after a restart: %d\n%.300s", resp.StatusCode, body)
	}
	n.Close()

	n = restart(node.MetricsOff)
	if n.MetricsAddr() != "" {
		t.Fatalf("MetricsOff: metrics at %s", n.MetricsAddr())
	}
	n.Close()
	n = restart("")
	defer n.Close()
	if n.MetricsAddr() != "" {
		t.Fatalf("restarted after MetricsOff: metrics at %s, want none", n.MetricsAddr())
	}
	if st, err := n.Layout().ReadState(); err != nil || st.MetricsListen != "" {
		t.Fatalf("node.json after MetricsOff: %+v %v", st, err)
	}
}

// raft's and memberlist's metrics come without names that embed a peer's
// id (raft's legacy duplicates of its labelled metrics) and without
// memberlist's size.local gauge, which reports header bytes as a size.
func TestLibraryMetricsAreClean(t *testing.T) {
	first, second, _ := twoNodes(t)
	cl := operator(t, first, second.Addr())
	waitCompleted(t, cl, submit(t, cl, "replicated"))
	n := start(t, node.Config{MetricsListen: "127.0.0.1:0"})
	gometrics.SetGaugeWithLabels([]string{"memberlist", "size", "local"}, 2.2e9, nil)
	resp, err := http.Get("http://" + n.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		name, _, _ := strings.Cut(l, " ")
		name, _, _ = strings.Cut(name, "{")
		for _, id := range []string{first.ID(), second.ID()} {
			if strings.Contains(name, strings.ReplaceAll(id, "-", "_")) {
				t.Errorf("metric %s names a peer in its name", name)
			}
		}
		if strings.HasPrefix(name, "palyra_memberlist_size_local") {
			t.Errorf("memberlist's size.local gauge is exported: %s", l)
		}
	}
	if !strings.Contains(string(body), "palyra_raft_replication_appendEntries_rpc") {
		t.Errorf("raft's labelled replication metrics are missing:\n%s", body)
	}
}
