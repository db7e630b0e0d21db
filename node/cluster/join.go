package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// Join makes this node a member of the cluster that the seeds (addresses of
// any members) belong to: it joins gossip, then asks the leader (found
// through whichever seed answers) to add it to raft as a non-voter;
// autopilot promotes it later if the cluster needs a voter. It retries with
// backoff until it succeeds or ctx ends. Joining again is harmless, and a
// restarted member needs no Join at all (Start rejoins by itself).
//
// A node that bootstrapped its own cluster cannot join another one: raft
// would have to merge two histories. Start joiners with empty raft state.
func (c *Cluster) Join(ctx context.Context, seeds []string) error {
	ml, err := c.running()
	if err != nil {
		return err
	}
	var peers []string
	for _, s := range seeds {
		if s != "" && s != c.cfg.Advertise {
			peers = append(peers, s)
		}
	}
	if len(peers) == 0 {
		return fmt.Errorf("cluster: no seeds to join other than this node (%s); give the address of a member", c.cfg.Advertise)
	}
	if conf, err := c.raftServers(); err == nil && len(conf) == 1 {
		if _, self := conf[c.cfg.NodeID]; self {
			return errors.New("cluster: this node is the only server of its own cluster (it bootstrapped), so it cannot join another; start it with an empty data dir (no bootstrap) to join")
		}
	}
	backoff := 50 * time.Millisecond
	for {
		var lastErr error
		if _, err := ml.Join(peers); err != nil {
			lastErr = fmt.Errorf("gossip join: %w", err)
		} else if lastErr = c.raftJoin(ctx, peers); lastErr == nil {
			c.log.Info("joined cluster", "seeds", peers)
			return nil
		}
		c.log.Debug("join attempt failed; retrying", "seeds", peers, "err", lastErr)
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: could not join through %v: %w (last error: %v)", peers, ctx.Err(), lastErr)
		case <-c.ctx.Done():
			return ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// KnownPeers returns the addresses of the other servers in this node's
// raft configuration, as its log last had it: on a restart, the members it
// knew, which may be other than the seeds it first joined through (those
// may be gone for good).
func (c *Cluster) KnownPeers() []string {
	conf, err := c.raftServers()
	if err != nil {
		return nil
	}
	var out []string
	for id, s := range conf {
		if id != c.cfg.NodeID && s.Address != "" && s.Address != c.cfg.Advertise {
			out = append(out, s.Address)
		}
	}
	slices.Sort(out)
	return out
}

// running returns the memberlist once Start ran, and refuses after Close or
// Leave.
func (c *Cluster) running() (*memberlist.Memberlist, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrClosed
	case c.left:
		return nil, errors.New("cluster: this node left the cluster; close it and start a new Cluster to join again")
	case c.ml == nil:
		return nil, errors.New("cluster: call Start before Join")
	}
	return c.ml, nil
}

// raftJoin asks each seed in turn to add this node, following a not_leader
// answer to the leader it names.
func (c *Cluster) raftJoin(ctx context.Context, seeds []string) error {
	req := &peerpb.Request{Body: &peerpb.Request_RaftJoin{RaftJoin: &peerpb.RaftJoinRequest{Id: c.cfg.NodeID, Address: c.cfg.Advertise}}}
	var lastErr error
	for _, addr := range seeds {
		want := ""
		for hop := 0; hop < 2; hop++ {
			resp, err := c.call(ctx, addr, want, req)
			if err != nil {
				lastErr = err
				break
			}
			e := resp.GetError()
			if e == nil {
				return nil
			}
			lastErr = &consensus.Error{Code: e.Code, Message: e.Message, Hint: e.Hint}
			if e.Code != consensus.ErrNotLeader.Code || e.LeaderAddress == "" {
				break
			}
			addr, want = e.LeaderAddress, e.LeaderId
		}
	}
	return fmt.Errorf("raft join: %w", lastErr)
}
