package node

import (
	"errors"
	"log/slog"
	"runtime"
	"time"

	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/runtime/browser"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

// DefaultListen is the QUIC address a node listens on by default.
const DefaultListen = "127.0.0.1:7444"

// MetricsOff as Config.MetricsListen (--metrics-listen off) serves no
// metrics and forgets the address recorded in the data dir.
const MetricsOff = "off"

// metricsAddrs picks where a node serves /metrics: the configured address;
// none for MetricsOff; else, on a restart, the one recorded at the last
// start, with the remote allowance it was recorded with.
func metricsAddrs(cfg Config, st State) (addr string, allowRemote bool) {
	switch cfg.MetricsListen {
	case MetricsOff:
		return "", false
	case "":
		return st.MetricsListen, cfg.MetricsAllowRemote || st.MetricsAllowRemote
	}
	return cfg.MetricsListen, cfg.MetricsAllowRemote
}

// Config configures a node. The zero value of every field but DataDir has a
// sane default.
type Config struct {
	DataDir string // default "palyra-data"
	// Listen is the UDP HOST:PORT to bind. Empty means the address this
	// node listened on last time (recorded in node.json), so a restart
	// keeps the address its peers know it by; DefaultListen on first start.
	Listen string
	// Advertise is the address peers dial (default: Listen, which must then
	// not be a wildcard; on a restart without Listen, the recorded one).
	Advertise string
	// TargetVoters is how many raft voters the cluster keeps (1, 3 or 5;
	// default 3).
	TargetVoters int
	ClusterName  string // name of a new cluster (first start only)
	Logger       *slog.Logger
	Version      string

	// WasmSlots is how many wasm jobs run at once on this node
	// (default: 2 × CPUs).
	WasmSlots int
	// BrowserSlots is how many browser jobs run at once (default 2 when
	// Chromium is installed; -1 disables browser jobs on this node).
	BrowserSlots int
	// BrowserPrewarm keeps a browser context per slot ready ahead of jobs
	// (browser.Config.Prewarm: faster short jobs, idle loopback listeners).
	BrowserPrewarm bool
	// CertTTL is the lifetime of the certificates this node signs while it
	// holds the CA key (a voter), and the default CA rotation overlap.
	CertTTL time.Duration
	// Labels describe this node to the scheduler and to policy (k=v).
	Labels map[string]string
	// Prefetch is how many wasm jobs per slot a worker may hold waiting
	// for a slot, when this node leads (0: the default, 4; negative:
	// none); ArrayPrefetch the most for array tasks (0: 32; the depth
	// used follows the tasks' run time; negative: tasks take Prefetch).
	Prefetch      int
	ArrayPrefetch int
	// LeaseTTL is how long a placement lives without its worker renewing
	// it (0: driver.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// MaxEndedJobs is how many ended jobs the cluster holds at most while
	// this node leads (0: driver.DefaultMaxEndedJobs); past it the oldest
	// are pruned before their retention.
	MaxEndedJobs uint64
	// HostCallTimeout bounds one host call of a wasm job run here (0:
	// DefaultHostCallTimeout).
	HostCallTimeout time.Duration
	// BlobGCInterval is how often unreferenced blobs are collected (0:
	// every minute); BlobGCGrace is how old an unreferenced blob must be
	// to go (0: 10 minutes).
	BlobGCInterval time.Duration
	BlobGCGrace    time.Duration
	// Network tunes the failure-detection timers (raft, gossip, the
	// dead-worker grace) for NetworkLAN or NetworkWAN; empty means the one
	// recorded at the last start, else NetworkLAN.
	Network string
	// MetricsListen, if set, serves Prometheus metrics over plain HTTP at
	// /metrics on this address; it must be loopback unless
	// MetricsAllowRemote. It is recorded in node.json: empty means the
	// address recorded at the last start (none on a new data dir), and
	// MetricsOff serves none and forgets the recorded one.
	MetricsListen      string
	MetricsAllowRemote bool
	// BrowserSessionIdleTTL closes a browser session unused this long
	// (default 10 minutes).
	BrowserSessionIdleTTL time.Duration
	// DetectBrowser finds the Chromium binary to run browser jobs with;
	// nil looks on this machine (browser.Detect). A node that finds none
	// asks again every 10 s (1 s with Fast) and starts running browser
	// jobs when it does.
	DetectBrowser func() (path string, ok bool)
	// Fast shortens raft timers; for tests only.
	Fast bool
	// WasmCacheDir holds the on-disk compilation cache (default: the data
	// dir's wasm-cache). In-process test clusters share one, so a Go guest
	// is compiled once per machine rather than once per node and test.
	WasmCacheDir string
}

func (c *Config) defaults() {
	if c.DataDir == "" {
		c.DataDir = "palyra-data"
	}
	if c.ClusterName == "" {
		c.ClusterName = "palyra"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.CertTTL == 0 {
		c.CertTTL = 24 * time.Hour
	}
	if c.TargetVoters == 0 { // as the cluster reads 0; the API reports it
		c.TargetVoters = cluster.DefaultTargetVoters
	}
}

// defaultBrowserSlots is Config.BrowserSlots' default, used while
// Chromium is installed.
const defaultBrowserSlots = 2

// DefaultHostCallTimeout is how long one host call of a wasm job (an
// HTTP fetch, a secret or key-value call) may take unless the node is
// started with another (the CLI cannot import the runtime: one-way
// dependencies).
const DefaultHostCallTimeout = wasm.DefaultHostCallTimeout

func defaultWasmSlots() int { return 2 * runtime.NumCPU() }

// Resolve is cfg with what a node decides for itself filled in, as Start
// decides it: the listen and advertise addresses (those recorded in the
// data dir at the last start, else DefaultListen; a wildcard listen
// advertises this machine's primary address), the network (the recorded
// one, else lan), the metrics address (the configured one, "" for
// MetricsOff, else the recorded one), 2 × CPUs wasm slots, 2 browser slots (used while
// Chromium is installed), 3 target voters and the 24h certificate
// lifetime. It reads the data dir and writes nothing; recorded reports
// whether the data dir holds a node, whose recorded settings then apply.
func Resolve(cfg Config) (_ Config, recorded bool, err error) {
	cfg.defaults()
	st, err := Layout{Dir: cfg.DataDir}.ReadState()
	switch {
	case err == nil:
		recorded = true
	case errors.Is(err, ErrNoState):
		st = State{}
	default:
		return cfg, false, err
	}
	cfg.Listen, cfg.Advertise = listenAddrs(cfg, st)
	if cfg.Advertise == "" {
		if adv, ok := wildcardAdvertise(cfg.Listen); ok {
			cfg.Advertise = adv
		}
	}
	if cfg.Network == "" {
		cfg.Network = st.Network
	}
	if cfg.Network == "" {
		cfg.Network = NetworkLAN
	}
	cfg.MetricsListen, cfg.MetricsAllowRemote = metricsAddrs(cfg, st)
	if cfg.WasmSlots <= 0 {
		cfg.WasmSlots = defaultWasmSlots()
	}
	if cfg.BrowserSlots == 0 {
		cfg.BrowserSlots = defaultBrowserSlots
	}
	if cfg.TargetVoters == 0 {
		cfg.TargetVoters = cluster.DefaultTargetVoters
	}
	return cfg, recorded, nil
}

// FindBrowser looks for the Chromium this machine would run browser jobs
// with, as a node does at start (it asks Chromium its version, which can
// take a moment).
func FindBrowser() (path string, ok bool) { return browser.Detect() }
