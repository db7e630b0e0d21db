package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	gometrics "github.com/armon/go-metrics"
	gmprom "github.com/armon/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/api"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/node/cluster"
)

// nodeMetrics is a node's Prometheus registry and the instruments its
// parts update. Each node has its own registry (tests run several nodes in
// one process); only raft's and memberlist's own metrics are process-wide,
// since those libraries report to one global sink (see raftSink).
type nodeMetrics struct {
	reg        *prometheus.Registry
	runs       *prometheus.CounterVec
	runSeconds *prometheus.HistogramVec
	latency    *prometheus.HistogramVec
	placements prometheus.Counter
	renewals   prometheus.Counter
	runHere    *prometheus.CounterVec // palyra_jobs_run_here_total, by outcome

	blobMu    sync.Mutex
	blobAt    time.Time
	blobBytes float64
	blobCount float64
}

// raftSink bridges raft's and memberlist's go-metrics into Prometheus:
// installed once per process as go-metrics' global sink, and registered in
// every node's registry.
var raftSink = sync.OnceValue(func() *gmprom.PrometheusSink {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: prometheus.NewRegistry(), Expiration: 5 * time.Minute})
	if err != nil {
		return nil
	}
	cfg := gometrics.DefaultConfig("palyra")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics, cfg.EnableHostnameLabel = false, false, false
	// memberlist's size.local gauge reads four bytes of its message header
	// as the size of the state it pushes (memberlist v0.6.0 net.go): values
	// like 2.2e9 for a few hundred bytes. Leave it out rather than mislead.
	cfg.BlockedPrefixes = []string{"palyra.memberlist.size.local"}
	if _, err := gometrics.NewGlobal(cfg, sink); err != nil {
		return nil
	}
	return sink
})

var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

func newNodeMetrics(n *Node) *nodeMetrics {
	m := &nodeMetrics{reg: prometheus.NewRegistry()}
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "palyra_worker_runs_total",
		Help: "Runs this node's worker finished, by kind and result (completed or failed)."}, []string{"kind", "result"})
	m.runSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "palyra_worker_run_seconds",
		Help: "How long runs took on this node's worker, by kind.", Buckets: latencyBuckets}, []string{"kind"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "palyra_job_latency_seconds",
		Help: "From a job's submission to its result on the worker that ran it, by kind.", Buckets: latencyBuckets}, []string{"kind"})
	m.placements = prometheus.NewCounter(prometheus.CounterOpts{Name: "palyra_scheduler_placements_total",
		Help: "Placements this node proposed while it led."})
	m.runHere = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "palyra_jobs_run_here_total",
		Help: "Jobs submitted to this node with a wait that it ran at once in a free slot, by whether the entry that accepted the job recorded the run (recorded) or the job went to the scheduler (dropped: the node stopped taking work meanwhile, or a member could not apply the entry)."}, []string{"outcome"})
	m.renewals = prometheus.NewCounter(prometheus.CounterOpts{Name: "palyra_lease_renewals_total",
		Help: "Lease renewals this node answered while it led."})
	groupCommit := func(name, help string, pick func(batches, batched, alone uint64) uint64) prometheus.CounterFunc {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if n.cluster == nil {
				return 0
			}
			return float64(pick(n.cluster.GroupCommitStats()))
		})
	}
	m.reg.MustRegister(
		groupCommit("palyra_group_commit_batches_total", "Entries of several commands (submits, cancels, results) this node sent to be committed together.",
			func(b, _, _ uint64) uint64 { return b }),
		groupCommit("palyra_group_commit_batched_commands_total", "Commands those entries carried.",
			func(_, c, _ uint64) uint64 { return c }),
		groupCommit("palyra_group_commit_alone_total", "Submits, cancels and results this node sent in an entry of their own (it leads, nothing to group them with, or a member of an older version).",
			func(_, _, a uint64) uint64 { return a }))
	m.reg.MustRegister(m.runs, m.runSeconds, m.latency, m.placements, m.renewals, m.runHere,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &stateCollector{n: n, m: m})
	if s := raftSink(); s != nil {
		m.reg.MustRegister(s)
	}
	return m
}

// observeRun records one finished run.
func (m *nodeMetrics) observeRun(kind string, ok bool, took time.Duration, submitted time.Time) {
	result := "completed"
	if !ok {
		result = "failed"
	}
	m.runs.WithLabelValues(kind, result).Inc()
	m.runSeconds.WithLabelValues(kind).Observe(took.Seconds())
	if !submitted.IsZero() {
		m.latency.WithLabelValues(kind).Observe(max(time.Since(submitted), 0).Seconds())
	}
}

// Text renders the node's metrics in the Prometheus text format.
func (m *nodeMetrics) Text() ([]byte, error) {
	mfs, err := m.reg.Gather()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// stateCollector reads, at scrape time, what the node knows: raft, the
// replicated jobs, membership, certificates, blobs, work in progress.
// Every read is an index or a counter: nothing scans the jobs.
type stateCollector struct {
	n *Node
	m *nodeMetrics
}

var (
	descRaftState  = prometheus.NewDesc("palyra_raft_leader", "1 if this node leads the raft group.", nil, nil)
	descRaftTerm   = prometheus.NewDesc("palyra_raft_term", "The raft term this node is in.", nil, nil)
	descRaftIndex  = prometheus.NewDesc("palyra_raft_index", "Raft log indexes: last, commit and applied.", []string{"index"}, nil)
	descJobs       = prometheus.NewDesc("palyra_jobs", "Jobs held in the replicated state, by phase.", []string{"phase"}, nil)
	descQueue      = prometheus.NewDesc("palyra_queue_depth", "Queued jobs waiting for a placement, by kind.", []string{"kind"}, nil)
	descMembers    = prometheus.NewDesc("palyra_members", "Cluster nodes as this node sees them, by state.", []string{"state"}, nil)
	descVoters     = prometheus.NewDesc("palyra_raft_voters", "Raft voters in this node's view of the configuration.", nil, nil)
	descCertExpiry = prometheus.NewDesc("palyra_certificate_expiry_seconds", "Seconds until this node's certificate expires (it renews at two thirds of its life).", nil, nil)
	descCertNotAft = prometheus.NewDesc("palyra_certificate_not_after_timestamp_seconds", "When this node's certificate expires, as a Unix time.", nil, nil)
	descCAKeys     = prometheus.NewDesc("palyra_ca_keys_held", "Cluster CA root keys this node holds (voters hold the active one).", nil, nil)
	descRunning    = prometheus.NewDesc("palyra_worker_running", "Runs in progress on this node's worker.", nil, nil)
	descSlots      = prometheus.NewDesc("palyra_worker_slots", "Runs this node's worker takes at once, by kind.", []string{"kind"}, nil)
	descBlobBytes  = prometheus.NewDesc("palyra_blob_bytes", "Bytes of content-addressed blobs (job inputs, outputs, modules, artifacts) stored on this node.", nil, nil)
	descBlobs      = prometheus.NewDesc("palyra_blobs", "Blobs stored on this node.", nil, nil)
	descSessions   = prometheus.NewDesc("palyra_browser_sessions", "Interactive browser sessions open on this node.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descRaftTerm, descRaftIndex, descJobs, descQueue, descMembers, descVoters,
		descCertExpiry, descCertNotAft, descCAKeys, descRunning, descSlots, descBlobBytes, descBlobs, descSessions} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	n.storeMu.RLock()
	st := n.store
	n.storeMu.RUnlock()
	if st != nil {
		s := st.Stats()
		leader := 0.0
		if s.State == "Leader" {
			leader = 1
		}
		gauge(descRaftState, leader)
		gauge(descRaftTerm, float64(s.Term))
		gauge(descRaftIndex, float64(s.LastIndex), "last")
		gauge(descRaftIndex, float64(s.CommitIndex), "commit")
		gauge(descRaftIndex, float64(s.AppliedIndex), "applied")
		state := st.State()
		byPhase := state.CountByPhase()
		for _, p := range consensus.AllPhases { // every phase, zeros included, so alerts see each series
			gauge(descJobs, float64(byPhase[p]), p.String())
		}
		for _, kind := range []string{"wasm", "browser"} {
			gauge(descQueue, float64(state.QueuedCount(kind)), kind)
		}
	}
	if n.cluster != nil {
		// The same state names as 'palyra nodes': a revoked node is removed.
		states := map[string]float64{cluster.StateAlive: 0, cluster.StateStopped: 0, cluster.StateDead: 0, cluster.StateLeft: 0, api.StateRemoved: 0}
		var reg api.AuthzState
		if st != nil {
			reg = st.State()
		}
		voters := 0.0
		for _, mb := range n.cluster.Members() {
			states[api.MemberState(reg, mb)]++
			if mb.Voter {
				voters++
			}
		}
		for s, v := range states {
			gauge(descMembers, v, s)
		}
		gauge(descVoters, voters)
	}
	if n.cred != nil {
		if cur := n.cred.Current(); cur != nil && cur.Leaf != nil {
			gauge(descCertExpiry, time.Until(cur.Leaf.NotAfter).Seconds())
			gauge(descCertNotAft, float64(cur.Leaf.NotAfter.Unix()))
		}
	}
	if n.keeper != nil {
		gauge(descCAKeys, float64(len(n.keeper.kr.Fingerprints())))
	}
	if n.worker != nil {
		gauge(descRunning, float64(n.worker.Running()))
	}
	for kind, slots := range n.capacity() {
		gauge(descSlots, float64(slots), kind)
	}
	if n.blobs != nil {
		bytes, count := c.m.blobUsage(n.blobs)
		gauge(descBlobBytes, bytes)
		gauge(descBlobs, count)
	}
	n.metaMu.Lock()
	ex := n.browser
	n.metaMu.Unlock()
	if ex != nil {
		gauge(descSessions, float64(len(ex.Sessions())))
	}
}

// blobUsage walks the blob store at most every 30 s (a walk reads a
// directory per blob shard).
func (m *nodeMetrics) blobUsage(s *blob.Store) (float64, float64) {
	m.blobMu.Lock()
	defer m.blobMu.Unlock()
	if time.Since(m.blobAt) < 30*time.Second {
		return m.blobBytes, m.blobCount
	}
	var bytes, count float64
	s.Walk(func(i blob.Info) bool {
		bytes += float64(i.Size)
		count++
		return true
	})
	m.blobBytes, m.blobCount, m.blobAt = bytes, count, time.Now()
	return bytes, count
}

// ErrMetricsNotLoopback refuses a metrics address other hosts can reach
// unless the operator asked for it.
var ErrMetricsNotLoopback = errors.New("the metrics endpoint is plain HTTP without authentication, so it binds loopback only; to serve it to other hosts (a Prometheus server elsewhere), add --metrics-allow-remote")

// CheckMetricsListen is checkMetricsListen for the CLI ('node start
// --print-config' says what start would refuse).
func CheckMetricsListen(addr string, allowRemote bool) error {
	if addr == "" || addr == MetricsOff {
		return nil
	}
	return checkMetricsListen(addr, allowRemote)
}

// checkMetricsListen validates the --metrics-listen address.
func checkMetricsListen(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("--metrics-listen %q is not HOST:PORT (e.g. 127.0.0.1:9464)", addr)
	}
	if allowRemote {
		return nil
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return ErrMetricsNotLoopback
	}
	return nil
}

// serveMetrics serves /metrics on cfg.MetricsListen until ctx ends.
func (n *Node) serveMetrics(ctx context.Context) error {
	ln, err := net.Listen("tcp", n.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("--metrics-listen: %w", err)
	}
	n.metricsAddr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{ErrorLog: nil}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "palyra node "+strings.TrimSpace(n.state.NodeID)+": metrics at /metrics")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		srv.Serve(ln)
	}()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		<-ctx.Done()
		srv.Close()
	}()
	n.log.Info("serving metrics", "address", "http://"+n.metricsAddr+"/metrics", "from", n.metricsFrom)
	return nil
}

// recordMetrics writes where this start serves /metrics to node.json (the
// bound address when the configured port was 0), or that it serves none,
// so a restart without --metrics-listen serves the same.
func (n *Node) recordMetrics() error {
	addr, allow := "", false
	if n.metricsAddr != "" {
		addr, allow = n.cfg.MetricsListen, n.cfg.MetricsAllowRemote
		if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
			addr = n.metricsAddr
		}
	}
	n.stateMu.Lock() // the blob push may record its end meanwhile
	defer n.stateMu.Unlock()
	if n.state.MetricsListen == addr && n.state.MetricsAllowRemote == allow {
		return nil
	}
	if n.state.MetricsListen != "" && addr == "" {
		n.log.Info("no longer serving metrics", "was", "http://"+n.state.MetricsListen+"/metrics")
	}
	n.state.MetricsListen, n.state.MetricsAllowRemote = addr, allow
	if err := n.layout.WriteState(n.state); err != nil {
		return fmt.Errorf("record metrics address: %w", err)
	}
	return nil
}

// MetricsAddr is where the node serves /metrics ("" when it does not).
func (n *Node) MetricsAddr() string { return n.metricsAddr }

// MetricsText is the node's metrics in the Prometheus text format.
func (n *Node) MetricsText() ([]byte, error) { return n.metrics.Text() }
