package cluster

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// apDelegate is autopilot's view of the application: who exists and how
// they are (from gossip), their raft progress (RaftStats RPC), and how to
// remove a dead one (after a grace period).
type apDelegate struct {
	c *Cluster

	mu        sync.Mutex
	voters    string               // last logged voter set, to log changes only
	removing  map[string]bool      // removals in flight
	unhealthy map[string]bool      // live servers last logged as unhealthy
	sickSince map[string]time.Time // live servers unhealthy: since when, while alive
	// stuck is unhealthy as the scheduler reads it: replaced whole.
	stuck atomic.Pointer[map[string]bool]
}

var _ autopilot.ApplicationIntegration = (*apDelegate)(nil)

// maxTrailingLogs is how far behind the leader a healthy server may be.
const maxTrailingLogs = 250

func (d *apDelegate) AutopilotConfig() *autopilot.Config {
	t := d.c.cfg.Tuning
	return &autopilot.Config{
		CleanupDeadServers:      true,
		LastContactThreshold:    t.LastContactThreshold,
		MaxTrailingLogs:         maxTrailingLogs,
		ServerStabilizationTime: t.StabilizationTime,
		// MinQuorum 0: autopilot still never removes voters a majority
		// depends on (it removes at most (voters-1)/2).
	}
}

// KnownServers reports every raft server with its gossip status: alive,
// left (graceful, or revoked), or failed (gossip declared it dead or never
// saw it).
// It also starts the grace clock for servers that are down.
func (d *apDelegate) KnownServers() map[raft.ServerID]*autopilot.Server {
	c := d.c
	conf, err := c.raftServers()
	if err != nil {
		return nil
	}
	_, leader := c.store.Leader()
	now := time.Now()
	out := make(map[raft.ServerID]*autopilot.Server, len(conf))
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, s := range conf {
		status := autopilot.NodeFailed
		var version string
		if m := c.members[id]; m != nil {
			version = m.meta.Version
			switch m.state {
			case StateAlive:
				status = autopilot.NodeAlive
			case StateLeft:
				status = autopilot.NodeLeft
			}
		}
		if id == c.cfg.NodeID {
			status = autopilot.NodeAlive
		} else if c.store.State().IsRevoked("node", id) {
			// Revoked (palyra node remove, or revoke): gone for good, so
			// removed at once, by whichever node leads now or later.
			status = autopilot.NodeLeft
		}
		if status == autopilot.NodeAlive {
			delete(c.downSince, id)
		} else if _, ok := c.downSince[id]; !ok {
			c.downSince[id] = now
		}
		out[raftID(id)] = &autopilot.Server{
			ID: raftID(id), Name: id, Address: raftAddr(s.Address), NodeStatus: status,
			Version: version, IsLeader: id == leader, NodeType: autopilot.NodeVoter,
		}
	}
	for id := range c.downSince {
		if _, ok := conf[id]; !ok {
			delete(c.downSince, id)
		}
	}
	return out
}

// FetchServerStats asks every live server for its raft progress, in
// parallel, within ctx (autopilot allows half an update interval).
func (d *apDelegate) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	c := d.c
	out := make(map[raft.ServerID]*autopilot.ServerStats, len(servers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, s := range servers {
		if s.NodeStatus != autopilot.NodeAlive {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.raftStats(ctx, string(id), string(s.Address))
			if err != nil {
				c.log.Debug("no raft stats from server", "peer", string(id), "err", err)
				return
			}
			st := statsFrom(r)
			mu.Lock()
			out[id] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func statsFrom(r interface {
	GetLastTerm() uint64
	GetLastIndex() uint64
	GetLastContactNs() int64
}) *autopilot.ServerStats {
	return &autopilot.ServerStats{LastContact: time.Duration(r.GetLastContactNs()),
		LastTerm: r.GetLastTerm(), LastIndex: r.GetLastIndex()}
}

// NotifyState logs voter-set and health changes.
func (d *apDelegate) NotifyState(s *autopilot.State) {
	key := ""
	for _, id := range s.Voters {
		key += string(id) + " "
	}
	if !s.Healthy {
		key += "(unhealthy)"
	}
	d.mu.Lock()
	changed := key != d.voters
	d.voters = key
	d.mu.Unlock()
	if changed {
		d.c.log.Info("autopilot state", "voters", key, "healthy", s.Healthy, "failure_tolerance", s.FailureTolerance)
	}
	d.logServerHealth(s, time.Now())
}

// unhealthyWarnAfter is how long a live server stays unhealthy (counted
// while gossip calls it alive) before the leader warns and stops placing
// work on it: a node that just joined or restarted is behind for a moment
// while it catches up.
const unhealthyWarnAfter = 10 * time.Second

// logServerHealth says when a live server has been unhealthy (behind the
// leader's log, or not hearing from it) for unhealthyWarnAfter, and when
// it is healthy again, and publishes those servers (LaggingServers). A
// server that is down is gossip's to report.
func (d *apDelegate) logServerHealth(s *autopilot.State, now time.Time) {
	var leaderLast uint64
	if l := s.Servers[s.Leader]; l != nil {
		leaderLast = l.Stats.LastIndex
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.unhealthy == nil {
		d.unhealthy, d.sickSince = map[string]bool{}, map[string]time.Time{}
	}
	for id, srv := range s.Servers {
		name := string(id)
		if srv.Server.NodeStatus != autopilot.NodeAlive || id == s.Leader || srv.Health.Healthy {
			// Down (gossip's to report), the leader, or healthy. autopilot's
			// own StableSince counts a node's time dead as unhealthy too, so
			// a restarted node would be "stuck" at once: the clock here runs
			// only while it is alive.
			delete(d.sickSince, name)
			if d.unhealthy[name] && srv.Health.Healthy {
				d.c.log.Info("raft server healthy again", "peer", name, "last_index", srv.Stats.LastIndex)
			}
			delete(d.unhealthy, name)
			continue
		}
		since, ok := d.sickSince[name]
		if !ok {
			d.sickSince[name] = now
			continue
		}
		if !d.unhealthy[name] && now.Sub(since) >= unhealthyWarnAfter {
			d.unhealthy[name] = true
			behind := uint64(0)
			if leaderLast > srv.Stats.LastIndex {
				behind = leaderLast - srv.Stats.LastIndex
			}
			d.c.log.Warn("raft server lagging: behind the leader's log or not hearing from it; it gets no new work, and while it lags it does not count towards the failure tolerance; 'palyra nodes' shows how far behind (a full disk, say: look at its log)",
				"peer", name, "last_index", srv.Stats.LastIndex, "leader_last_index", leaderLast,
				"behind", behind, "last_contact", srv.Stats.LastContact.String(), "for", now.Sub(since).Round(time.Second).String())
		}
	}
	for name := range d.sickSince {
		if _, ok := s.Servers[raft.ServerID(name)]; !ok {
			delete(d.sickSince, name)
		}
	}
	for name := range d.unhealthy {
		if _, ok := s.Servers[raft.ServerID(name)]; !ok {
			delete(d.unhealthy, name)
		}
	}
	stuck := maps.Clone(d.unhealthy)
	d.stuck.Store(&stuck)
}

// reset forgets the servers' health: autopilot stops or starts with a
// change of leadership, and what an earlier term saw is stale (a server
// sick then would be flagged lagging at once on the next unhealthy round).
func (d *apDelegate) reset() {
	d.mu.Lock()
	d.unhealthy, d.sickSince = nil, nil
	d.mu.Unlock()
	d.stuck.Store(nil)
}

// LaggingServers are the live raft servers that have been unhealthy
// (behind the leader's log, or not hearing from it) for
// unhealthyWarnAfter or longer, as this node's autopilot last found them.
// Autopilot runs on the leader, so elsewhere the set is empty or stale. A
// lagging server would see a placement late or never (it applies nothing
// new), so the scheduler gives it no new work; what it runs is left alone,
// since it can still report results through the leader.
func (c *Cluster) LaggingServers() map[string]bool {
	if m := c.apd.stuck.Load(); m != nil {
		return *m
	}
	return nil
}

// RemoveFailedServer removes a server that left at once and a dead one
// only after Tuning.DeadServerGrace, so a node that restarts or is briefly
// cut off keeps its place. Autopilot calls it on every pass, so a server
// still in its grace period is simply skipped this time.
func (d *apDelegate) RemoveFailedServer(s *autopilot.Server) {
	c := d.c
	id := string(s.ID)
	if s.NodeStatus != autopilot.NodeLeft {
		c.mu.Lock()
		since, ok := c.downSince[id]
		c.mu.Unlock()
		if !ok || time.Since(since) < c.cfg.Tuning.DeadServerGrace {
			return
		}
	}
	d.mu.Lock()
	if d.removing == nil {
		d.removing = map[string]bool{}
	}
	busy := d.removing[id]
	d.removing[id] = true
	d.mu.Unlock()
	if busy {
		return
	}
	c.goLoop(func() {
		defer func() {
			d.mu.Lock()
			delete(d.removing, id)
			d.mu.Unlock()
		}()
		if err := c.raft.RemoveServer(s.ID, 0, 0).Error(); err != nil {
			c.log.Warn("could not remove failed server", "peer", id, "err", err)
			return
		}
		c.log.Info("removed failed server from raft", "peer", id, "status", string(s.NodeStatus))
	})
}
