package cluster

import (
	"context"
	"slices"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"
)

// leadershipLoop runs autopilot while this node leads, and only then. Before
// starting it, the new leader applies everything committed in earlier terms
// (a barrier), which read-index reads rely on.
func (c *Cluster) leadershipLoop() {
	changes := c.store.LeadershipChanges()
	defer func() { <-c.ap.Stop() }()
	for {
		select {
		case <-c.ctx.Done():
			return
		case leader := <-changes:
			if !leader {
				c.leaderReady.Store(false)
				<-c.ap.Stop()
				c.apd.reset()
				c.log.Info("lost leadership; autopilot stopped")
				continue
			}
			ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
			err := c.store.Barrier(ctx)
			cancel()
			if err != nil {
				c.log.Warn("new leader could not apply earlier entries", "err", err)
				continue // leadership is being lost; the next change says so
			}
			c.leaderReady.Store(true)
			c.mu.Lock()
			left := c.left
			c.mu.Unlock()
			if !left && c.ctx.Err() == nil {
				c.apd.reset() // health seen in an earlier term is stale
				c.ap.Start(c.ctx)
				c.log.Info("leading; autopilot started")
			}
			c.kickHousekeeping()
		}
	}
}

// housekeeping keeps gossip and raft in step, on a timer and whenever
// gossip reports a change:
//   - every node re-joins gossip with members gossip lost but raft still
//     lists (memberlist alone never heals a partition), and notices raft
//     configuration changes;
//   - the leader adds alive gossip members that raft does not know yet.
func (c *Cluster) housekeeping() {
	t := c.cfg.Tuning
	reconnect := time.NewTicker(t.ReconnectInterval)
	defer reconnect.Stop()
	reconcile := time.NewTicker(t.AutopilotReconcile)
	defer reconcile.Stop()
	poll := time.NewTicker(t.ConfigPoll)
	defer poll.Stop()
	c.pollConfig()
	c.reconnect() // at once: a restarted node rejoins through raft's addresses
	c.updateOwnAddress()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-poll.C:
			c.pollConfig()
		case <-reconnect.C:
			c.reconnect()
			c.forgetDeparted()
			c.updateOwnAddress()
		case <-reconcile.C:
			c.addGossipMembers()
		case <-c.kick:
			c.pollConfig()
			c.addGossipMembers()
		}
	}
}

// pollConfig records the latest raft configuration and tells subscribers
// when the set of servers or their suffrage changed.
func (c *Cluster) pollConfig() {
	conf, err := c.raftServers()
	if err != nil {
		return
	}
	c.mu.Lock()
	changed := len(conf) != len(c.confIDs)
	for id, s := range conf {
		if old, ok := c.confIDs[id]; !ok || old != s.Suffrage {
			changed = true
		}
	}
	if changed {
		c.confIDs = make(map[string]raftSuffrage, len(conf))
		for id, s := range conf {
			c.confIDs[id] = s.Suffrage
		}
	}
	c.mu.Unlock()
	if changed {
		c.log.Info("raft configuration changed", "servers", describe(conf))
		c.notify()
	}
}

// reconnect re-joins gossip with every server raft lists and every member
// gossip calls dead, in the background, one attempt at a time.
func (c *Cluster) reconnect() {
	ml := c.memberlist()
	if ml == nil || !c.reconnecting.CompareAndSwap(false, true) {
		return
	}
	conf, _ := c.raftServers()
	var addrs []string
	seen := map[string]bool{}
	c.mu.Lock()
	if c.left {
		c.mu.Unlock()
		c.reconnecting.Store(false)
		return
	}
	for id, s := range conf {
		if m := c.members[id]; id != c.cfg.NodeID && (m == nil || isDown(m.state)) && !seen[s.Address] {
			seen[s.Address] = true
			addrs = append(addrs, s.Address)
		}
	}
	for id, m := range c.members {
		if id != c.cfg.NodeID && isDown(m.state) && !seen[m.addr] {
			seen[m.addr] = true
			addrs = append(addrs, m.addr)
		}
	}
	c.mu.Unlock()
	if len(addrs) == 0 {
		c.reconnecting.Store(false)
		return
	}
	c.goLoop(func() {
		defer c.reconnecting.Store(false)
		for _, a := range addrs {
			if c.ctx.Err() != nil {
				return
			}
			if _, err := ml.Join([]string{a}); err != nil {
				c.log.Debug("gossip reconnect failed", "address", a, "err", err)
			} else {
				c.log.Info("gossip reconnected", "address", a)
			}
		}
	})
}

// forgetDeparted drops members that left or died and are no longer in the
// raft configuration, once nobody can need them any more.
func (c *Cluster) forgetDeparted() {
	ttl := 10 * c.cfg.Tuning.DeadServerGrace
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, m := range c.members {
		if _, inRaft := c.confIDs[id]; !inRaft && m.state != StateAlive && time.Since(m.since) > ttl {
			delete(c.members, id)
		}
	}
	for id, at := range c.departing {
		if time.Since(at) > ttl {
			delete(c.departing, id)
		}
	}
}

// addGossipMembers, on the leader, adds to raft (as non-voters) the alive
// gossip members raft does not list: a node that joined gossip but whose
// RaftJoin was lost, or one removed while it was cut off. Gossip names are
// not authenticated, so the leader first calls the member and checks that
// its certificate names the same node.
func (c *Cluster) addGossipMembers() {
	if !c.leaderReady.Load() {
		return
	}
	conf, err := c.raftServers()
	if err != nil {
		return
	}
	type cand struct{ id, addr string }
	var todo []cand
	c.mu.Lock()
	if c.left {
		c.mu.Unlock()
		return
	}
	for id, m := range c.members {
		_, inRaft := conf[id]
		_, departing := c.departing[id]
		// A member alive for less than a reconcile interval probably has
		// its own RaftJoin in flight; let that win.
		young := time.Since(m.since) < c.cfg.Tuning.AutopilotReconcile
		if inRaft || departing || m.leaving || m.state != StateAlive || young || c.verifying[id] {
			continue
		}
		c.verifying[id] = true
		todo = append(todo, cand{id, m.addr})
	}
	c.mu.Unlock()
	for _, m := range todo {
		c.goLoop(func() {
			defer func() {
				c.mu.Lock()
				delete(c.verifying, m.id)
				c.mu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
			defer cancel()
			if _, err := c.call(ctx, m.addr, m.id, statsRequest()); err != nil {
				c.log.Debug("not adding gossip member to raft: it did not answer as itself", "peer", m.id, "err", err)
				return
			}
			if err := c.ap.AddServer(&autopilot.Server{ID: raftID(m.id), Address: raftAddr(m.addr)}); err != nil {
				c.log.Warn("could not add gossip member to raft", "peer", m.id, "err", err)
				return
			}
			c.log.Info("added gossip member to raft as non-voter", "peer", m.id, "address", m.addr)
		})
	}
}

// updateOwnAddress brings this node's raft address up to date after it
// restarted on a new one: the leader records its own new address, and a
// follower asks the leader to (a RaftJoin with the new address, which
// autopilot applies as an address update that keeps the suffrage). Until
// then the others dial the old address and cannot reach it.
func (c *Cluster) updateOwnAddress() {
	conf, err := c.raftServers()
	if err != nil {
		return
	}
	self, ok := conf[c.cfg.NodeID]
	if !ok || self.Address == c.cfg.Advertise || !c.updatingAddr.CompareAndSwap(false, true) {
		return
	}
	c.goLoop(func() {
		defer c.updatingAddr.Store(false)
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Tuning.ReconnectInterval)
		defer cancel()
		var err error
		if c.store.IsLeader() {
			if isVoter(self.Suffrage) {
				err = c.raft.AddVoter(raftID(c.cfg.NodeID), raftAddr(c.cfg.Advertise), 0, c.cfg.Tuning.ReconnectInterval).Error()
			} else {
				err = c.raft.AddNonvoter(raftID(c.cfg.NodeID), raftAddr(c.cfg.Advertise), 0, c.cfg.Tuning.ReconnectInterval).Error()
			}
		} else {
			var seeds []string
			for id, s := range conf {
				if id != c.cfg.NodeID {
					seeds = append(seeds, s.Address)
				}
			}
			if len(seeds) == 0 {
				return
			}
			slices.Sort(seeds)
			err = c.raftJoin(ctx, seeds)
		}
		if err != nil {
			c.log.Info("could not record this node's new address in raft yet; retrying", "old_address", self.Address, "address", c.cfg.Advertise, "err", err)
			return
		}
		c.log.Info("recorded this node's new address in raft", "old_address", self.Address, "address", c.cfg.Advertise)
		c.kickHousekeeping()
	})
}
