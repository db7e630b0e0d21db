package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/mesh"
)

// ErrClosed is returned by operations on a closed (or left) Cluster.
var ErrClosed = errors.New("cluster: closed")

// Cluster is this node's membership in a cluster: gossip, voter management
// (autopilot, on the leader), the peer RPC server, and the write and read
// paths that work the same on every node.
type Cluster struct {
	policyLogged sync.Map // node id → when a policy refusal of its work was last logged
	cfg          Config
	log          *slog.Logger
	store        *consensus.Store
	raft         *raft.Raft
	ap           *autopilot.Autopilot
	apd          *apDelegate

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	started    bool
	closed     bool
	left       bool
	stopping   bool // Stopping announced a clean stop
	ml         *memberlist.Memberlist
	metaBytes  []byte
	meta       Meta
	members    map[string]*member   // gossip's view, by node id
	departing  map[string]time.Time // leader: nodes that asked to leave
	verifying  map[string]bool      // leader: gossip members being added to raft
	downSince  map[string]time.Time // leader: when a raft server was first seen down
	lastLeader leaderInfo
	// elected are when this node saw a new leader (one after none, or
	// another), the last hour's (LeaderChanges).
	elected   []time.Time
	fwd       forwards                       // forwards to the leader in flight, ended when it moves
	confIDs   map[string]raft.ServerSuffrage // last raft configuration seen
	subs      []chan struct{}
	conflicts map[string]bool // gossip id conflicts already logged

	leaderReady  atomic.Bool // leader and its barrier for this term is done
	reconnecting atomic.Bool
	updatingAddr atomic.Bool
	kick         chan struct{} // asks the housekeeping loop to run now
	obs          *raft.Observer
	// verifyHook replaces store.VerifyLeader when set (a test seam).
	verifyHook atomic.Pointer[func(context.Context) error]
	// piggyback plans placements to ride on commands this leader proposes.
	piggyback atomic.Pointer[Piggyback]
	// leases renews workers' leases on the leader.
	leases atomic.Pointer[LeaseKeeper]
	// outputs reads this node's worker's live job output.
	outputs atomic.Pointer[OutputSource]
	// browsers serves browser-session calls on this node's worker.
	browsers atomic.Pointer[BrowserHandler]
	// batch groups submits, cancels and results into one entry (batch.go).
	batch batcher
}

type leaderInfo struct{ id, addr string }

// New checks cfg and returns a Cluster that does nothing until Start.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Meta = cfg.Meta.clone()
	if !cfg.withoutBatch { // tests leave them out to play an older node
		for _, f := range features {
			if !slices.Contains(cfg.Meta.Features, f) {
				cfg.Meta.Features = append(cfg.Meta.Features, f)
			}
		}
	}
	mb, err := encodeMeta(cfg.Meta, farewell{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{
		cfg: cfg, log: cfg.Logger.With("component", "cluster"),
		store: cfg.Store, raft: cfg.Store.Raft(),
		ctx: ctx, cancel: cancel,
		metaBytes: mb, meta: cfg.Meta.clone(),
		members: map[string]*member{}, departing: map[string]time.Time{},
		verifying: map[string]bool{}, downSince: map[string]time.Time{},
		kick: make(chan struct{}, 1),
	}
	c.batch.c = c
	cfg.Store.SetHookRules(c.hookRules)
	c.apd = &apDelegate{c: c}
	c.ap = autopilot.New(c.raft, c.apd,
		autopilot.WithLogger(newHCLogger(cfg.Logger, "autopilot")),
		autopilot.WithPromoter(&promoter{target: cfg.TargetVoters}),
		autopilot.WithUpdateInterval(cfg.Tuning.AutopilotUpdate),
		autopilot.WithReconcileInterval(cfg.Tuning.AutopilotReconcile))
	return c, nil
}

// ID is this node's id.
func (c *Cluster) ID() string { return c.cfg.NodeID }

// Start serves peer RPC, starts gossip and the background loops. If the
// store already has raft state naming other servers (a restart), the node
// rejoins gossip through their addresses by itself: no Join call is needed.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.started:
		c.mu.Unlock()
		return errors.New("cluster: Start called twice")
	}
	c.started = true
	c.members[c.cfg.NodeID] = &member{id: c.cfg.NodeID, addr: c.cfg.Advertise, state: StateAlive, meta: c.meta.clone(), since: time.Now()}
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.cfg.Transport.Handle(mesh.TagRPC, c.serveRPC); err != nil {
		return fmt.Errorf("cluster: serve peer RPC: %w", err)
	}
	// Not under c.mu: memberlist calls the delegates from inside Create.
	ml, err := memberlist.Create(c.memberlistConfig())
	if err != nil {
		c.cfg.Transport.Handle(mesh.TagRPC, nil)
		return fmt.Errorf("cluster: start gossip: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed { // Close ran meanwhile and could not shut gossip down
		ml.Shutdown()
		return ErrClosed
	}
	c.ml = ml
	obsCh := make(chan raft.Observation, 16)
	c.obs = raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	c.raft.RegisterObserver(c.obs)
	c.goLoop(func() { c.watchLeader(obsCh) })
	c.goLoop(c.leadershipLoop)
	c.goLoop(c.housekeeping)
	c.log.Info("cluster started", "address", c.cfg.Advertise, "target_voters", c.cfg.TargetVoters)
	return nil
}

func (c *Cluster) goLoop(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// memberlist returns the running memberlist, or nil before Start / after Close.
func (c *Cluster) memberlist() *memberlist.Memberlist {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	return c.ml
}

// Close stops autopilot, gossip (without a graceful leave: others will see
// this node as dead, or stopped after Stopping) and peer RPC, and closes every Changes channel. It
// leaves the Store and Transport to their owner; close them after.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	ml, obs, started := c.ml, c.obs, c.started
	c.mu.Unlock()

	c.cancel()
	<-c.ap.Stop()
	var err error
	if started {
		c.cfg.Transport.Handle(mesh.TagRPC, nil)
		if obs != nil {
			c.raft.DeregisterObserver(obs)
		}
		if ml != nil {
			err = ml.Shutdown()
		}
	}
	c.wg.Wait()
	c.mu.Lock()
	for _, s := range c.subs {
		close(s)
	}
	c.subs = nil
	c.mu.Unlock()
	return err
}

// WaitLeader blocks until this node knows a leader and returns its id. On
// the leader itself it also waits until the leader has applied everything
// committed before its term, so it can serve linearizable reads. It is the
// measuring point for failover in tests and benchmarks.
func (c *Cluster) WaitLeader(ctx context.Context) (string, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if addr, id := c.store.Leader(); id != "" {
			c.sawLeader(id, addr)
			if id != c.cfg.NodeID || c.leaderReady.Load() {
				return id, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("cluster: no leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Leader returns the current leader's address and id as this node knows
// them (the order of consensus.Store.Leader), empty when there is none.
func (c *Cluster) Leader() (addr, id string) {
	addr, id = c.store.Leader()
	if id != "" {
		c.sawLeader(id, addr)
	}
	return addr, id
}

// State is the local replica's state; call VerifyRead first for a
// linearizable read. With Apply it makes a Cluster a drop-in for the
// worker's and API's view of the store.
func (c *Cluster) State() *consensus.State { return c.store.State() }

// Stats returns the local raft figures.
func (c *Cluster) Stats() consensus.Stats { return c.store.Stats() }

// sawLeader records the last leader this node knew of, for error messages.
func (c *Cluster) sawLeader(id, addr string) {
	c.mu.Lock()
	c.lastLeader = leaderInfo{id: id, addr: addr}
	c.mu.Unlock()
}

// leaderWindow is how long LeaderChanges remembers elections.
const leaderWindow = time.Hour

// sawElection records that a new leader was seen at t.
func (c *Cluster) sawElection(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.elected[:0]
	for _, at := range c.elected {
		if t.Sub(at) < leaderWindow {
			keep = append(keep, at)
		}
	}
	c.elected = append(keep, t)
}

// LeaderChanges says how many times this node saw a new leader (one after
// none, or another) in the last hour, and when it saw the current one
// (zero while it knows none). A node's first leader counts: a node up
// for less than the hour saw at least that one.
func (c *Cluster) LeaderChanges(now time.Time) (changes int, since time.Time) {
	c.mu.Lock()
	elected := slices.Clone(c.elected)
	c.mu.Unlock()
	if _, id := c.store.Leader(); id == "" {
		return within(elected, now), time.Time{}
	}
	return within(elected, now), last(elected)
}

// within counts the times in the hour before now.
func within(ts []time.Time, now time.Time) int {
	n := 0
	for _, at := range ts {
		if now.Sub(at) < leaderWindow {
			n++
		}
	}
	return n
}

// last is the latest of ts (zero if none).
func last(ts []time.Time) time.Time {
	if len(ts) == 0 {
		return time.Time{}
	}
	return ts[len(ts)-1]
}

// watchLeader follows raft's leader observations: it records the leader and
// tells subscribers that leadership moved.
func (c *Cluster) watchLeader(ch chan raft.Observation) {
	last := ""
	// The leader and term of the last election counted: losing touch with
	// a leader for a moment (a node catching up) and hearing from it again
	// in the same term is no election.
	var counted string
	var countedTerm uint64
	for {
		select {
		case <-c.ctx.Done():
			return
		case o := <-ch:
			lo := o.Data.(raft.LeaderObservation)
			if lo.LeaderID != "" {
				c.sawLeader(string(lo.LeaderID), string(lo.LeaderAddr))
			}
			if string(lo.LeaderID) != last {
				last = string(lo.LeaderID)
				if term := c.raft.CurrentTerm(); last != "" && (last != counted || term > countedTerm) {
					counted, countedTerm = last, term
					c.sawElection(time.Now())
				}
				c.fwd.moved(last)
				c.log.Info("leader changed", "leader", last, "address", string(lo.LeaderAddr))
				c.notify()
			}
		}
	}
}

// Departing reports whether this node announced a clean stop or a leave.
func (c *Cluster) Departing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping || c.left
}

// Stopping announces in this node's gossip meta that it is about to stop
// cleanly without leaving, so that once gossip loses it the others list it
// as stopped (StateStopped) rather than dead. It changes only what they
// show: every decision treats a stopped member as a dead one. Call it
// before Close; it waits (up to a second, or ctx) for the announcement to
// go out, and it is kept in any meta set afterwards.
func (c *Cluster) Stopping(ctx context.Context) error {
	c.mu.Lock()
	if c.closed || c.left || c.stopping {
		c.mu.Unlock()
		return nil
	}
	mb, err := encodeMeta(c.meta, farewell{stopping: true})
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.stopping, c.metaBytes = true, mb
	ml := c.ml
	c.mu.Unlock()
	if ml == nil {
		return nil
	}
	if err := ml.UpdateNode(bounded(ctx, time.Second)); err != nil {
		return fmt.Errorf("cluster: announce stop: %w", err)
	}
	return nil
}

// SetMeta replaces this node's gossiped meta (e.g. after its capacity
// changed) and spreads it; other members see it in Members and get a
// Changes event.
func (c *Cluster) SetMeta(ctx context.Context, m Meta) error {
	c.mu.Lock()
	if c.closed || c.left {
		c.mu.Unlock()
		return ErrClosed
	}
	m.Features = c.meta.Features // the software's, not the caller's
	mb, err := encodeMeta(m, farewell{stopping: c.stopping})
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.meta, c.metaBytes = m.clone(), mb
	if self := c.members[c.cfg.NodeID]; self != nil {
		self.meta = m.clone()
	}
	ml := c.ml
	c.mu.Unlock()
	c.notify()
	if ml == nil {
		return nil // gossiped from Start on
	}
	if err := ml.UpdateNode(bounded(ctx, 5*time.Second)); err != nil {
		return fmt.Errorf("cluster: spread meta: %w", err)
	}
	return nil
}
