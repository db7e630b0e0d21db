package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/mesh"
)

// DefaultTargetVoters is the number of voters a cluster keeps when
// Config.TargetVoters is zero.
const DefaultTargetVoters = 3

// Config says who this node is and what the cluster runs on.
type Config struct {
	// NodeID is this node's id: its certificate's principal, its raft server
	// ID and its gossip name.
	NodeID string
	// Advertise is the address peers dial (one port for everything). Empty
	// means the transport's advertise address; if set it must equal it.
	Advertise string
	// Transport is the node's QUIC transport; the cluster uses its gossip
	// transport and the TagRPC streams. The caller owns and closes it.
	Transport *mesh.Transport
	// Store is the node's raft store. The caller owns and closes it (after
	// the Cluster). Open it with Bootstrap only on the first node of a new
	// cluster; a joining node must start with empty raft state. New tells
	// it which hook rules its proposals may carry (Store.SetHookRules).
	Store *consensus.Store
	// Meta is gossiped to every member (at most 512 bytes encoded).
	Meta Meta
	// TargetVoters is how many voters the cluster keeps among healthy
	// nodes: 1, 3 or 5 (0 means 3). Every other node is a non-voter that
	// still follows the log.
	TargetVoters int
	// Tuning sets gossip and autopilot timers; zero fields take LANTuning's
	// values, or FastTuning's when Fast is set.
	Tuning Tuning
	// Fast selects FastTuning defaults (in-process tests).
	Fast bool
	// Logger receives cluster, gossip and autopilot events; nil means
	// slog.Default().
	Logger *slog.Logger
	// CAKeys returns the cluster CA keys this node holds, to hand to a
	// voter that asks (FetchCAKeys). nil: this node hands out none.
	CAKeys func() []CAKey
	// NodeWork authorises a peer's own work by the cluster's policy: action
	// is one of the policy's node_work actions (raft.join, worker.heartbeat,
	// worker.report on jobID); a non-nil error refuses the call with it.
	// nil allows everything (tests of this package).
	NodeWork func(pr identity.Principal, action, jobID string) error
	// NodeWorkOn is NodeWork for a job given by its submission's submitter
	// and kind (one not in the state yet: a RunHere's); nil: NodeWork.
	NodeWorkOn func(pr identity.Principal, action, jobID, submitter, kind string) error
	// withoutBatch leaves FeatureBatch out of the node's features (tests:
	// a node of an older version).
	withoutBatch bool
}

// Tuning holds the timers of failure detection and voter management.
type Tuning struct {
	// Gossip (memberlist). A silent node is suspected after about
	// ProbeInterval+ProbeTimeout and declared dead SuspicionMult probe
	// intervals (× log10 of the cluster size, at least 1) later. Until
	// other members confirm the suspicion, that wait is up to
	// SuspicionMaxTimeoutMult times longer (memberlist's Lifeguard), so a
	// lone prober with a bad link does not kill a healthy node.
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	GossipInterval          time.Duration
	PushPullInterval        time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	// ReconnectInterval is how often a node re-joins gossip with members
	// that gossip calls dead but raft still lists (this heals partitions,
	// which memberlist alone does not).
	ReconnectInterval time.Duration

	// Autopilot (leader only).
	AutopilotUpdate      time.Duration // how often server health is refreshed
	AutopilotReconcile   time.Duration // how often voters are promoted/demoted
	LastContactThreshold time.Duration // a server silent this long is unhealthy
	StabilizationTime    time.Duration // healthy this long before promotion
	DeadServerGrace      time.Duration // dead this long before removal from raft

	// LeaderWait bounds how long Apply and VerifyRead wait for a reachable
	// leader before failing with code no_quorum.
	LeaderWait time.Duration
	// ConfigPoll is how often the raft configuration is checked for
	// membership changes (Changes).
	ConfigPoll time.Duration
}

// LANTuning is the production default: a dead node is declared dead
// about 1–2 s after it stops answering (probe 300 ms, 200 ms for an ack,
// suspicion 3 probe intervals, at most 2× that unconfirmed), and replaced
// as a voter a few seconds later. node/cluster/DESIGN.md says why this is
// safe on a LAN and what a WAN needs instead (WANTuning).
func LANTuning() Tuning {
	return Tuning{
		ProbeInterval: 300 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond,
		GossipInterval: 100 * time.Millisecond, PushPullInterval: 15 * time.Second,
		SuspicionMult: 3, SuspicionMaxTimeoutMult: 2, ReconnectInterval: 5 * time.Second,
		AutopilotUpdate: time.Second, AutopilotReconcile: 2 * time.Second,
		LastContactThreshold: 2 * time.Second, StabilizationTime: 5 * time.Second,
		DeadServerGrace: time.Minute,
		LeaderWait:      3 * time.Second, ConfigPoll: time.Second,
	}
}

// WANTuning is for nodes spread over sites (round trips of tens to
// hundreds of milliseconds, lossy paths): memberlist's own WAN timers
// (probe 5 s, 3 s for an ack, suspicion ×6), so a slow link is not a
// death; a dead node is declared dead after about 30 s.
func WANTuning() Tuning {
	t := LANTuning()
	t.ProbeInterval, t.ProbeTimeout = 5*time.Second, 3*time.Second
	t.GossipInterval, t.PushPullInterval = 500*time.Millisecond, time.Minute
	t.SuspicionMult, t.SuspicionMaxTimeoutMult = 6, 6
	t.ReconnectInterval = 15 * time.Second
	t.LastContactThreshold, t.StabilizationTime = 10*time.Second, 30*time.Second
	t.DeadServerGrace = 5 * time.Minute
	t.LeaderWait = 10 * time.Second
	return t
}

// FastTuning shortens every timer for in-process tests on a loaded machine
// (short, but not so short that -race on two cores causes false deaths).
func FastTuning() Tuning {
	return Tuning{
		ProbeInterval: 250 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond,
		GossipInterval: 50 * time.Millisecond, PushPullInterval: time.Second,
		SuspicionMult: 3, SuspicionMaxTimeoutMult: 6, ReconnectInterval: 500 * time.Millisecond,
		AutopilotUpdate: 250 * time.Millisecond, AutopilotReconcile: 300 * time.Millisecond,
		LastContactThreshold: time.Second, StabilizationTime: 500 * time.Millisecond,
		DeadServerGrace: 2 * time.Second,
		// As long as production's and more: an election under -race on a
		// loaded 2-core machine can take seconds, and a read or write
		// caught in it should wait it out, not fail.
		LeaderWait: 5 * time.Second, ConfigPoll: 100 * time.Millisecond,
	}
}

// withDefaults fills zero fields from d.
func (t Tuning) withDefaults(d Tuning) Tuning {
	durs := []struct{ v, def *time.Duration }{
		{&t.ProbeInterval, &d.ProbeInterval}, {&t.ProbeTimeout, &d.ProbeTimeout},
		{&t.GossipInterval, &d.GossipInterval}, {&t.PushPullInterval, &d.PushPullInterval},
		{&t.ReconnectInterval, &d.ReconnectInterval}, {&t.AutopilotUpdate, &d.AutopilotUpdate},
		{&t.AutopilotReconcile, &d.AutopilotReconcile}, {&t.LastContactThreshold, &d.LastContactThreshold},
		{&t.StabilizationTime, &d.StabilizationTime}, {&t.DeadServerGrace, &d.DeadServerGrace},
		{&t.LeaderWait, &d.LeaderWait}, {&t.ConfigPoll, &d.ConfigPoll},
	}
	for _, f := range durs {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if t.SuspicionMult == 0 {
		t.SuspicionMult = d.SuspicionMult
	}
	if t.SuspicionMaxTimeoutMult == 0 {
		t.SuspicionMaxTimeoutMult = d.SuspicionMaxTimeoutMult
	}
	return t
}

// validate checks cfg and fills defaults. Errors say which field to fix.
func (cfg *Config) validate() error {
	if cfg.Transport == nil || cfg.Store == nil {
		return errors.New("cluster: Config.Transport and Config.Store are required")
	}
	if err := (identity.Principal{Kind: identity.KindNode, ID: cfg.NodeID}).Validate(); err != nil {
		return fmt.Errorf("cluster: Config.NodeID %q is not a node id (want the node certificate's id, e.g. n-1a2b3c4d): %w", cfg.NodeID, err)
	}
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.Transport.AdvertiseAddr()
	}
	if cfg.Advertise != cfg.Transport.AdvertiseAddr() {
		return fmt.Errorf("cluster: Config.Advertise %s differs from the transport's advertise address %s; set mesh.Config.AdvertiseAddr instead", cfg.Advertise, cfg.Transport.AdvertiseAddr())
	}
	if _, _, err := net.SplitHostPort(cfg.Advertise); err != nil {
		return fmt.Errorf("cluster: advertise address %q is not host:port: %w", cfg.Advertise, err)
	}
	switch cfg.TargetVoters {
	case 0:
		cfg.TargetVoters = DefaultTargetVoters
	case 1, 3, 5:
	default:
		return fmt.Errorf("cluster: Config.TargetVoters is %d; use 1, 3 or 5 (an even number of voters adds no fault tolerance, more than 5 slows every commit)", cfg.TargetVoters)
	}
	def := LANTuning()
	if cfg.Fast {
		def = FastTuning()
	}
	cfg.Tuning = cfg.Tuning.withDefaults(def)
	if cfg.Tuning.ProbeTimeout > cfg.Tuning.ProbeInterval {
		return fmt.Errorf("cluster: Tuning.ProbeTimeout %v exceeds ProbeInterval %v; the timeout must fit inside the interval", cfg.Tuning.ProbeTimeout, cfg.Tuning.ProbeInterval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return nil
}
