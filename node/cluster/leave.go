package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// Leave takes this node out of the cluster gracefully: it announces the
// leave in its gossip meta, hands leadership to another voter if it leads,
// has the leader remove it from raft (autopilot then promotes a spare if
// voters fall below target), and finally leaves gossip, so others see it as
// left rather than dead. Call Close afterwards.
func (c *Cluster) Leave(ctx context.Context) error {
	c.mu.Lock()
	ml := c.ml
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case ml == nil:
		c.mu.Unlock()
		return errors.New("cluster: call Start before Leave")
	case c.left:
		c.mu.Unlock()
		return nil
	}
	mb, err := encodeMeta(c.meta, farewell{leaving: true, stopping: c.stopping})
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.left, c.metaBytes = true, mb
	c.mu.Unlock()

	wait := bounded(ctx, 5*time.Second)
	if err := ml.UpdateNode(wait); err != nil {
		c.log.Debug("leave announcement not confirmed", "err", err)
	}
	conf, err := c.raftServers()
	if err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	delete(conf, c.cfg.NodeID)
	if len(conf) > 0 {
		if err := c.leaveRaft(ctx); err != nil {
			return err
		}
	}
	if err := ml.Leave(bounded(ctx, 5*time.Second)); err != nil {
		return fmt.Errorf("cluster: leave gossip: %w", err)
	}
	c.log.Info("left the cluster")
	return nil
}

// leaveRaft hands leadership over if this node leads, then asks the leader
// to remove it.
func (c *Cluster) leaveRaft(ctx context.Context) error {
	req := &peerpb.Request{Body: &peerpb.Request_Leave{Leave: &peerpb.LeaveRequest{Id: c.cfg.NodeID}}}
	return c.onLeader(ctx, true, func(ctx context.Context) error {
		c.log.Info("leaving as leader")
		if err := c.handOver(ctx, c.ensureSuccessor); err != nil {
			return err
		}
		// Not the leader any more: go round and ask the new one.
		return &consensus.Error{Code: consensus.ErrNotLeader.Code, Message: "handed leadership over"}
	}, req, func(*peerpb.Response) error { return nil })
}

// bounded is d, or less if ctx ends sooner.
func bounded(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < d {
			return max(left, time.Millisecond)
		}
	}
	return d
}

// ensureSuccessor makes sure another voter exists to take leadership: with
// TargetVoters 1 the leader is the only voter, so an alive non-voter is
// promoted first.
func (c *Cluster) ensureSuccessor(ctx context.Context) error {
	conf, err := c.raftServers()
	if err != nil {
		return err
	}
	var pick string
	c.mu.Lock()
	for id, s := range conf {
		if id == c.cfg.NodeID {
			continue
		}
		if isVoter(s.Suffrage) {
			c.mu.Unlock()
			return nil
		}
		if m := c.members[id]; m != nil && m.state == StateAlive && (pick == "" || id < pick) {
			pick = id
		}
	}
	c.mu.Unlock()
	if pick == "" {
		return &consensus.Error{Code: codeFailedPrecond,
			Message: "cannot leave: no other alive server can take over leadership",
			Hint:    "start or join another node first, or stop this one without leaving"}
	}
	c.log.Info("leaving: promoting a successor", "peer", pick)
	err = c.raft.AddVoter(raftID(pick), raftAddr(conf[pick].Address), 0, bounded(ctx, 10*time.Second)).Error()
	if err != nil {
		return fmt.Errorf("cluster: promote successor %s: %w", pick, err)
	}
	return nil
}
