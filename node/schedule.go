package node

import (
	"context"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/node/scheduler/driver"
	"github.com/palyra-mesh/palyra/node/worker"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Defaults for how many placements per slot a worker may hold beyond
// those it runs (see driver.Config.Prefetch): four waiting jobs per slot
// while jobs are short (one once they take longer: see driver.shortJob);
// for array tasks, up to 32 per slot, as many as about 100 ms of work by
// the tasks' average run (driver.taskQueueBudget): tasks are many and
// alike, and deeper queues mean fewer rounds per task. Four measured +40%
// jobs/s over one at 64 submitters; 32 array tasks 10,400 tasks/s
// against 4,300–4,900 with a fixed 8.
const (
	defaultPrefetch      = 4
	defaultArrayPrefetch = 32
)

// orDefault maps a config value to its meaning: 0 the default, negative none.
func orDefault(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// runScheduler runs the scheduling driver (node/scheduler/driver) while
// this node leads: it wires the replicated state, gossip's view of the
// workers, and the leader-bound Apply.
func (n *Node) runScheduler(ctx context.Context) {
	d := driver.New(driver.Config{
		State: n.store.State(),
		Apply: func(ctx context.Context, cmd *raftpb.Command) error {
			_, err := n.store.Apply(ctx, cmd)
			return err
		},
		Workers:       n.workers,
		MemberChanges: n.cluster.Changes(),
		Leadership:    n.store.LeadershipChanges(),
		IsLeader:      n.store.IsLeader(),
		Logger:        n.log,
		Prefetch:      map[string]int{"wasm": orDefault(n.cfg.Prefetch, defaultPrefetch)},
		ArrayPrefetch: map[string]int{"wasm": orDefault(n.cfg.ArrayPrefetch, defaultArrayPrefetch)},
		LeaseTTL:      n.cfg.LeaseTTL,
		MaxEndedJobs:  n.cfg.MaxEndedJobs,
		MinEndedAge:   n.minEndedAge(),
		Placed:        func(k int) { n.metrics.placements.Add(float64(k)) },
		// Re-queueing a worker that is not dead after all is safe: its
		// results carry a stale attempt and are refused.
		DeadWorkerGrace: n.timers.DeadWorkerGrace,
		Tick:            n.timers.SchedulerTick,
	})
	n.cluster.SetPiggyback(d.Piggyback)
	defer n.cluster.SetPiggyback(nil)
	n.cluster.SetLeaseKeeper(func(node string, held []*peerpb.LeaseRef) ([]*peerpb.LeaseRef, time.Duration) {
		n.metrics.renewals.Inc()
		ls := make([]driver.Lease, len(held))
		for i, h := range held {
			ls[i] = driver.Lease{JobID: h.JobId, Attempt: h.Attempt}
		}
		var lost []*peerpb.LeaseRef
		for _, l := range d.Renew(node, ls) {
			lost = append(lost, &peerpb.LeaseRef{JobId: l.JobID, Attempt: l.Attempt})
		}
		return lost, d.LeaseTTL()
	})
	defer n.cluster.SetLeaseKeeper(nil)
	d.Run(ctx)
}

// workers is gossip's view of the nodes, for the scheduler.
func (n *Node) workers() []driver.Worker {
	ms := n.cluster.Members()
	lagging := n.cluster.LaggingServers()
	out := make([]driver.Worker, 0, len(ms))
	for _, m := range ms {
		refused := n.authz.NodeWork(identity.Principal{Kind: identity.KindNode, ID: m.ID}, policy.ActionWorkerHeartbeat, "") != nil
		slots := m.Capacity
		if m.Departing {
			// It announced its stop before it handed leadership over and
			// withdrew its slots: a new leader that had not yet heard of
			// the withdrawal placed the jobs it handed back on it again (a
			// user trial, 1 SIGTERM of the leader in 5).
			slots = nil
		}
		out = append(out, driver.Worker{ID: m.ID, Alive: m.State == cluster.StateAlive, Lagging: lagging[m.ID], Refused: refused,
			Slots: slots, Labels: m.Labels})
	}
	return out
}

// nodeLeases renews the worker's leases with the leader.
type nodeLeases struct{ n *Node }

func (l nodeLeases) RenewLeases(ctx context.Context, held []worker.Lease) ([]worker.Lease, time.Duration, error) {
	refs := make([]*peerpb.LeaseRef, len(held))
	for i, h := range held {
		refs[i] = &peerpb.LeaseRef{JobId: h.JobID, Attempt: h.Attempt}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lost, ttl, err := l.n.cluster.RenewLeases(ctx, refs)
	out := make([]worker.Lease, len(lost))
	for i, r := range lost {
		out[i] = worker.Lease{JobID: r.JobId, Attempt: r.Attempt}
	}
	return out, ttl, err
}

// minEndedAge is how long an ended job is kept whatever the cap on ended
// jobs: driver.DefaultMinEndedAge, none for in-process tests (Fast).
func (n *Node) minEndedAge() time.Duration {
	if n.cfg.Fast {
		return -1
	}
	return driver.DefaultMinEndedAge
}
