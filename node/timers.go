package node

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/node/cluster"
)

// Networks a node's timers can be tuned for (Config.Network, --network).
const (
	NetworkLAN = "lan" // one site: sub-millisecond round trips (the default)
	NetworkWAN = "wan" // several sites: round trips up to a few hundred ms
)

// Timers are a node's failure-detection timers: raft's (how soon a dead
// leader is replaced), gossip's (how soon a dead node is declared dead,
// in Gossip) and how long the scheduler waits after that before a dead
// worker's jobs run elsewhere. node/cluster/DESIGN.md explains the values.
type Timers struct {
	Network string
	// Raft: a follower that hears nothing from the leader for between
	// RaftHeartbeat and about 3× it stands for election (pre-vote first, so
	// a lone follower with a bad link cannot depose a healthy leader); a
	// leader that cannot reach a quorum for RaftLeaderLease steps down.
	RaftHeartbeat   time.Duration
	RaftElection    time.Duration
	RaftLeaderLease time.Duration
	Gossip          cluster.Tuning
	// DeadWorkerGrace is how long the leader must have seen a worker dead
	// before its running jobs are re-queued; SchedulerTick bounds how late
	// after that (and after a retry backoff or a deadline) the scheduler
	// looks again when nothing else wakes it.
	DeadWorkerGrace time.Duration
	SchedulerTick   time.Duration
}

// TimersFor returns the timers for a network: NetworkLAN ("" too) or
// NetworkWAN.
func TimersFor(network string) (Timers, error) {
	switch network {
	case "", NetworkLAN:
		return Timers{Network: NetworkLAN,
			RaftHeartbeat: 300 * time.Millisecond, RaftElection: 300 * time.Millisecond, RaftLeaderLease: 300 * time.Millisecond,
			Gossip: cluster.LANTuning(), DeadWorkerGrace: 250 * time.Millisecond, SchedulerTick: 100 * time.Millisecond}, nil
	case NetworkWAN:
		return Timers{Network: NetworkWAN,
			RaftHeartbeat: 2 * time.Second, RaftElection: 2 * time.Second, RaftLeaderLease: time.Second,
			Gossip: cluster.WANTuning(), DeadWorkerGrace: 5 * time.Second, SchedulerTick: 500 * time.Millisecond}, nil
	}
	return Timers{}, fmt.Errorf("unknown network %q: use %s (one site) or %s (several sites)", network, NetworkLAN, NetworkWAN)
}

// fastTimers are for in-process tests (Config.Fast): shorter gossip than
// production, but raft no shorter than 500 ms, since -race on two loaded
// cores stalls goroutines for hundreds of milliseconds.
func fastTimers() Timers {
	return Timers{Network: "test",
		RaftHeartbeat: 500 * time.Millisecond, RaftElection: 500 * time.Millisecond, RaftLeaderLease: 250 * time.Millisecond,
		Gossip: cluster.FastTuning(), DeadWorkerGrace: 3 * time.Second, SchedulerTick: 500 * time.Millisecond}
}

// tuneRaft applies the raft timers (pre-vote stays on: raft enables it
// with a transport that supports it, as ours does).
func (t Timers) tuneRaft(c *raft.Config) {
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = t.RaftHeartbeat, t.RaftElection, t.RaftLeaderLease
	c.PreVoteDisabled = false
}

// String describes the timers in one line, for logs and benchmarks.
func (t Timers) String() string {
	g := t.Gossip
	return fmt.Sprintf("%s: raft heartbeat %s, election %s, leader lease %s, pre-vote on; gossip probe %s, ack timeout %s, suspicion ×%d (×%d unconfirmed); dead-worker grace %s, scheduler tick %s",
		t.Network, t.RaftHeartbeat, t.RaftElection, t.RaftLeaderLease, g.ProbeInterval, g.ProbeTimeout,
		g.SuspicionMult, g.SuspicionMult*g.SuspicionMaxTimeoutMult, t.DeadWorkerGrace, t.SchedulerTick)
}

// pickTimers chooses the node's timers: the configured network, else the
// one recorded at the last start (so a restart keeps it), else the LAN's;
// test nodes (Config.Fast) use fastTimers. A new choice is recorded.
func (n *Node) pickTimers() (Timers, error) {
	if n.cfg.Fast {
		return fastTimers(), nil
	}
	network := n.cfg.Network
	if network == "" {
		network = n.state.Network
	}
	t, err := TimersFor(network)
	if err != nil {
		return Timers{}, err
	}
	if n.state.Network != t.Network {
		if n.state.Network != "" {
			n.log.Info("failure-detection timers changed", "network", t.Network, "was", n.state.Network)
		}
		n.state.Network = t.Network
		if err := n.layout.WriteState(n.state); err != nil {
			return Timers{}, fmt.Errorf("record network: %w", err)
		}
	}
	return t, nil
}

// Timers are the failure-detection timers this node runs with.
func (n *Node) Timers() Timers { return n.timers }
