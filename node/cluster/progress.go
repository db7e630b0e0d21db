package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// RaftProgress is one raft server's progress, as it reported it.
type RaftProgress struct {
	LastIndex    uint64 // last entry in its raft log
	AppliedIndex uint64 // last log entry raft applied, of any type, as in status (0: too old a node to say)
	// LastContact is how long ago it last heard from a leader: negative if
	// never, 0 for the leader itself.
	LastContact time.Duration
}

// Behind is how many entries the server's state trails leaderLast: its
// applied index, or its last log index if it did not say.
func (p RaftProgress) Behind(leaderLast uint64) uint64 {
	idx := p.AppliedIndex
	if idx == 0 {
		idx = p.LastIndex
	}
	if leaderLast > idx {
		return leaderLast - idx
	}
	return 0
}

// ServerProgress is a server's progress measured against the leader's.
type ServerProgress struct {
	RaftProgress
	// Behind is how many entries its state trails the leader's log (0
	// when no leader answered).
	Behind uint64
	// Lagging is autopilot's test of health failed: further behind the
	// leader's log than a healthy follower gets (maxTrailingLogs), or no
	// word from a leader within the tuning's LastContactThreshold. Such a
	// voter acknowledges no new appends, so it does not count towards the
	// failure tolerance while it lags.
	Lagging bool
}

// Progress asks each raft server gossip reports alive for its raft
// progress, in parallel, within ctx, and returns those that answered by
// node id (this node's own from its raft directly), each measured against
// the leader's log.
func (c *Cluster) Progress(ctx context.Context) map[string]ServerProgress {
	raw := c.fetchProgress(ctx)
	_, leader := c.store.Leader()
	l, haveLeader := raw[leader]
	out := make(map[string]ServerProgress, len(raw))
	for id, p := range raw {
		sp := ServerProgress{RaftProgress: p}
		if id == leader {
			sp.LastContact = 0
		} else {
			if haveLeader {
				sp.Behind = p.Behind(l.LastIndex)
			}
			sp.Lagging = sp.Behind > maxTrailingLogs || p.LastContact < 0 || p.LastContact > c.cfg.Tuning.LastContactThreshold
		}
		out[id] = sp
	}
	return out
}

// fetchProgress is Progress's raw answers.
func (c *Cluster) fetchProgress(ctx context.Context) map[string]RaftProgress {
	conf, err := c.raftServers()
	if err != nil {
		return nil
	}
	alive := map[string]bool{}
	c.mu.Lock()
	for id, m := range c.members {
		alive[id] = m.state == StateAlive
	}
	c.mu.Unlock()
	out := make(map[string]RaftProgress, len(conf))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, s := range conf {
		if id != c.cfg.NodeID && !alive[id] {
			continue
		}
		wg.Go(func() {
			st, err := c.raftStats(ctx, id, string(s.Address))
			if err != nil {
				c.log.Debug("no raft stats from server", "peer", id, "err", err)
				return
			}
			mu.Lock()
			out[id] = progressFrom(st)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// raftStats is one server's RaftStats answer (this node's own directly).
func (c *Cluster) raftStats(ctx context.Context, id, addr string) (*peerpb.RaftStatsResponse, error) {
	if id == c.cfg.NodeID {
		return c.localStats(), nil
	}
	resp, err := c.call(ctx, addr, id, statsRequest())
	if err != nil {
		return nil, err
	}
	if resp.GetRaftStats() == nil {
		return nil, errNoStats
	}
	return resp.GetRaftStats(), nil
}

var errNoStats = errors.New("the server answered without raft stats")

func progressFrom(r *peerpb.RaftStatsResponse) RaftProgress {
	return RaftProgress{LastIndex: r.GetLastIndex(), AppliedIndex: r.GetAppliedIndex(),
		LastContact: time.Duration(r.GetLastContactNs())}
}
