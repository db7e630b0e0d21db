package cluster

import (
	"maps"
	"slices"
)

// Member is one node as this node sees it: liveness from gossip, voting
// rights and leadership from raft, meta from the node's own gossip.
type Member struct {
	ID      string
	Address string
	// State is alive, stopped, dead or left (StateAlive, StateStopped,
	// StateDead, StateLeft). A server raft lists but gossip has never heard
	// from is dead. Stopped is for display only: treat it as dead.
	State string
	// Voter is true for raft voters; every other raft server is a
	// non-voter that still follows the log. Members outside the raft
	// configuration (joining, or left) are neither.
	Voter  bool
	InRaft bool
	// RaftAddress is where raft reaches the node ("" outside raft); it
	// differs from Address for a moment after a restart on a new address.
	RaftAddress string
	Leader      bool
	// Labels and Capacity are shared with the cluster's own view (a
	// member's meta is replaced whole when it changes, never edited):
	// read them, do not modify them.
	Labels   map[string]string
	Capacity map[string]int
	Version  string
	// Features are what its software supports that older versions do not
	// (FeatureBatch…): nil for a server gossip never heard from.
	Features []string
	// Departing: its meta announces a clean stop or a leave ('node
	// leave'); it is going, and takes no new work whatever it offers.
	Departing bool
}

// Alive reports whether gossip hears from node id: Members' StateAlive,
// without building the list (it is asked once per submit).
func (c *Cluster) Alive(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.members[id]
	return ok && m.state == StateAlive
}

// Members lists every node that gossip knows or raft lists, sorted by id.
// It is this node's view: a follower's raft configuration may trail the
// leader's by a moment.
func (c *Cluster) Members() []Member {
	conf, _ := c.raftServers()
	_, leader := c.store.Leader()
	c.mu.Lock()
	out := make([]Member, 0, len(c.members)+len(conf))
	for id, m := range c.members {
		meta := m.meta // shared, not copied: meta is replaced whole, never edited (Member's doc)
		departing := m.leaving || m.stopping
		if id == c.cfg.NodeID {
			meta, departing = c.meta, c.stopping || c.left
		}
		out = append(out, Member{ID: id, Address: m.addr, State: m.state,
			Labels: meta.Labels, Capacity: meta.Capacity, Version: meta.Version, Features: meta.Features, Departing: departing})
	}
	c.mu.Unlock()
	known := make(map[string]int, len(out))
	for i := range out {
		known[out[i].ID] = i
	}
	for _, id := range slices.Sorted(maps.Keys(conf)) {
		if _, ok := known[id]; !ok {
			known[id] = len(out)
			out = append(out, Member{ID: id, Address: conf[id].Address, State: StateDead})
		}
	}
	for i := range out {
		s, ok := conf[out[i].ID]
		out[i].InRaft, out[i].Voter, out[i].RaftAddress = ok, ok && isVoter(s.Suffrage), s.Address
		out[i].Leader = out[i].ID == leader
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}
