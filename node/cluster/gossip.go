package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/mesh"
)

// Member states as reported by Members.
const (
	StateAlive = "alive" // gossip hears from it
	StateDead  = "dead"  // gossip declared it failed, or raft lists it and gossip never saw it
	StateLeft  = "left"  // it left gracefully (Leave)
	// StateStopped is a member that announced a clean stop (Stopping)
	// before gossip lost it: still a member, expected back. Only what is
	// shown differs; every decision treats it as dead (isDown).
	StateStopped = "stopped"
)

// isDown reports whether a member state is dead or stopped, which every
// decision treats alike.
func isDown(state string) bool { return state == StateDead || state == StateStopped }

// member is gossip's view of one node.
type member struct {
	id, addr string
	state    string
	meta     Meta
	leaving  bool      // its meta announced a graceful leave
	stopping bool      // its meta announced a clean stop
	since    time.Time // last state change
}

// memberlistConfig builds memberlist's configuration from Tuning, over the
// mesh transport filtered to node principals.
func (c *Cluster) memberlistConfig() *memberlist.Config {
	t := c.cfg.Tuning
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.cfg.NodeID
	mc.Transport = newNodeOnlyGossip(c.cfg.Transport, c.log)
	mc.UDPBufferSize = mesh.GossipPacketSize
	mc.ProbeInterval, mc.ProbeTimeout = t.ProbeInterval, t.ProbeTimeout
	mc.GossipInterval, mc.PushPullInterval = t.GossipInterval, t.PushPullInterval
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = t.SuspicionMult, t.SuspicionMaxTimeoutMult
	mc.TCPTimeout = max(time.Second, 4*t.ProbeInterval)
	mc.GossipToTheDeadTime = max(10*time.Second, 20*t.ProbeInterval)
	// A node that comes back on a new address after a while may take its
	// name back (memberlist refuses by default).
	mc.DeadNodeReclaimTime = 2 * t.ReconnectInterval
	mc.EnableCompression = false // packets are small; QUIC datagrams cap them anyway
	d := &gossipDelegate{c: c}
	mc.Delegate, mc.Events, mc.Alive, mc.Conflict = d, d, d, d
	mc.Logger = newStdLogger(c.log.With("component", "gossip"))
	return mc
}

// gossipDelegate feeds memberlist's callbacks into the member table. Every
// method is quick and never blocks: memberlist calls them on its hot paths.
type gossipDelegate struct{ c *Cluster }

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	if len(d.c.metaBytes) > limit {
		return nil // cannot happen: encodeMeta checks the size
	}
	return d.c.metaBytes
}

func (d *gossipDelegate) NotifyMsg([]byte)                {}
func (d *gossipDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(bool) []byte          { return nil }
func (d *gossipDelegate) MergeRemoteState([]byte, bool)   {}

// NotifyAlive refuses gossip names that cannot be node ids, so a confused
// or hostile peer cannot fill the member table with junk.
func (d *gossipDelegate) NotifyAlive(n *memberlist.Node) error {
	if err := (identity.Principal{Kind: identity.KindNode, ID: n.Name}).Validate(); err != nil {
		return fmt.Errorf("gossip member %q is not a node id: %w", n.Name, err)
	}
	return nil
}

// NotifyConflict is called while a node id gossips from a new address
// before gossip has declared the old one dead: usually a node restarted
// on another address (it is accepted once the old address is declared
// dead and the reclaim time passed), rarely two nodes made from copies of
// one data dir. Logged once per id and address pair.
func (d *gossipDelegate) NotifyConflict(existing, other *memberlist.Node) {
	key := existing.Name + " " + existing.Address() + " " + other.Address()
	d.c.mu.Lock()
	if d.c.conflicts == nil {
		d.c.conflicts = map[string]bool{}
	}
	seen := d.c.conflicts[key]
	d.c.conflicts[key] = true
	d.c.mu.Unlock()
	if seen {
		return
	}
	t := d.c.cfg.Tuning
	d.c.log.Warn("a node gossips from a new address while its old one still counts as alive",
		"node", existing.Name, "address", existing.Address(), "new_address", other.Address(),
		"hint", fmt.Sprintf("if it restarted on a new --listen, the new address is taken once the old one is declared dead (within about %s); if it stays, two running nodes share one id: one was made from a copy of the other's data dir, so stop it and join it afresh with an empty data dir",
			(t.ProbeInterval*time.Duration(2*t.SuspicionMult)+2*t.ReconnectInterval).Round(time.Second)))
}

func (d *gossipDelegate) NotifyJoin(n *memberlist.Node)   { d.c.gossipAlive(n, true) }
func (d *gossipDelegate) NotifyUpdate(n *memberlist.Node) { d.c.gossipAlive(n, false) }
func (d *gossipDelegate) NotifyLeave(n *memberlist.Node)  { d.c.gossipGone(n) }

// gossipAlive records a node gossip hears from (join) or whose meta or
// address changed (update).
func (c *Cluster) gossipAlive(n *memberlist.Node, join bool) {
	meta, f, err := decodeMeta(n.Meta)
	if err != nil {
		c.log.Warn("ignoring bad gossip meta", "peer", n.Name, "err", err)
	}
	c.mu.Lock()
	m := c.members[n.Name]
	if m == nil {
		m = &member{id: n.Name}
		c.members[n.Name] = m
	}
	wasAlive := m.state == StateAlive
	m.addr, m.meta, m.leaving, m.stopping = n.Address(), meta, f.leaving, f.stopping
	if !wasAlive {
		m.state, m.since = StateAlive, time.Now()
	}
	c.mu.Unlock()
	if join && !wasAlive && n.Name != c.cfg.NodeID {
		c.log.Info("member alive", "peer", n.Name, "address", n.Address())
		c.kickHousekeeping()
	}
	c.notify()
}

// gossipGone records a node gossip no longer hears from. memberlist does
// not say whether it left or died, so a node counts as left if it announced
// its leave in its meta, asked the leader to remove it, or is already out of
// the raft configuration; otherwise it is stopped if its meta announced a
// clean stop, and dead if not.
func (c *Cluster) gossipGone(n *memberlist.Node) {
	c.mu.Lock()
	m := c.members[n.Name]
	if m == nil {
		m = &member{id: n.Name, addr: n.Address()}
		c.members[n.Name] = m
	}
	_, asked := c.departing[n.Name]
	_, inRaft := c.confIDs[n.Name]
	state := StateDead
	switch {
	case m.leaving || asked || (len(c.confIDs) > 0 && !inRaft):
		state = StateLeft
	case m.stopping:
		state = StateStopped
	}
	m.state, m.since = state, time.Now()
	c.mu.Unlock()
	switch state {
	case StateDead:
		c.log.Warn("member failed", "peer", n.Name, "address", n.Address())
	case StateStopped:
		c.log.Info("member stopped", "peer", n.Name, "address", n.Address())
	default:
		c.log.Info("member left", "peer", n.Name, "address", n.Address())
	}
	c.kickHousekeeping()
	c.notify()
}
