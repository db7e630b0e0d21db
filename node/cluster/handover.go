package cluster

import (
	"cmp"
	"context"
	"fmt"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/palyra-mesh/palyra/consensus"
)

// HandOff hands leadership to another voter when this node leads and is
// about to stop (node's Close calls it first, on SIGTERM or SIGINT). The
// others then have a leader at once instead of after an election timeout,
// and nothing forwarded here meanwhile is cut off: while raft transfers,
// new writes are refused with not_leader, which sends them round to the new
// leader, and the writes already proposed commit (or, if raft cannot tell,
// report an unknown outcome) and are answered, because this node keeps
// serving its API and peer RPC until HandOff returns. It does nothing on a
// follower, before Start, after Leave, or when no other voter that gossip
// calls alive could take over (a transfer to none would only fail after an
// election timeout). ctx bounds it; Close is still to be called after.
func (c *Cluster) HandOff(ctx context.Context) error {
	c.mu.Lock()
	skip := !c.started || c.closed || c.left
	c.mu.Unlock()
	if skip || !c.store.IsLeader() {
		return nil
	}
	if _, ok := c.successor(); !ok {
		c.log.Info("stopping as leader: no other live voter to hand leadership to")
		return nil
	}
	return c.handOver(ctx, nil)
}

// handOver makes this leader step down by raft's leadership transfer, for
// Leave and HandOff: it stops autopilot (it acts for a leader that stays),
// runs prepare when given (Leave promotes a successor there), and hands
// leadership to successor, or to raft's own pick when gossip knows no live
// voter. It returns once this node no longer leads; a failed transfer is a
// not_leader error (raft refused or timed out: the caller may go round).
func (c *Cluster) handOver(ctx context.Context, prepare func(context.Context) error) error {
	c.leaderReady.Store(false)
	select { // autopilot stops between its rounds; a round stuck on raft does not hold a stop past ctx
	case <-c.ap.Stop():
	case <-ctx.Done():
		return fmt.Errorf("cluster: leadership transfer: autopilot did not stop: %w", ctx.Err())
	}
	if prepare != nil {
		if err := prepare(ctx); err != nil {
			return err
		}
	}
	var f raft.Future
	if s, ok := c.successor(); ok {
		c.log.Info("handing leadership over", "to", s.ID)
		f = c.raft.LeadershipTransferToServer(s.ID, s.Address)
	} else {
		c.log.Info("handing leadership over")
		f = c.raft.LeadershipTransfer()
	}
	// raft bounds the transfer by about two election timeouts; ctx may be
	// shorter.
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return &consensus.Error{Code: consensus.ErrNotLeader.Code,
				Message: fmt.Sprintf("leadership transfer failed: %v", err)}
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cluster: leadership transfer: %w", ctx.Err())
	}
}

// successor is the voter to hand leadership to: another voter that gossip
// calls alive, autopilot's healthy ones first, then the one whose log was
// longest at autopilot's last look (raft's own pick goes by log length
// alone, blind to a voter that died), then by id for a stable choice.
func (c *Cluster) successor() (raft.Server, bool) {
	conf, err := c.raftServers()
	if err != nil {
		return raft.Server{}, false
	}
	var st map[raft.ServerID]*autopilot.ServerState
	if s := c.ap.GetState(); s != nil {
		st = s.Servers
	}
	rank := func(id string) (healthy bool, last uint64) {
		if s := st[raftID(id)]; s != nil {
			return s.Health.Healthy, s.Stats.LastIndex
		}
		return false, 0
	}
	var pick string
	c.mu.Lock()
	for id, s := range conf {
		if id == c.cfg.NodeID || !isVoter(s.Suffrage) {
			continue
		}
		if m := c.members[id]; m == nil || m.state != StateAlive {
			continue
		}
		if pick == "" || better(rank, id, pick) {
			pick = id
		}
	}
	c.mu.Unlock()
	if pick == "" {
		return raft.Server{}, false
	}
	return raft.Server{Suffrage: raft.Voter, ID: raftID(pick), Address: raftAddr(conf[pick].Address)}, true
}

// better reports whether voter a is a better successor than b by rank:
// healthy first, then the longer log, then the smaller id.
func better(rank func(string) (bool, uint64), a, b string) bool {
	ha, la := rank(a)
	hb, lb := rank(b)
	if ha != hb {
		return ha
	}
	if c := cmp.Compare(la, lb); c != 0 {
		return c > 0
	}
	return a < b
}
