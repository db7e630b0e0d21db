package node

import (
	"context"

	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/node/scheduler/driver"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// defaultPrefetch is how many placements per slot a worker may hold
// beyond those it runs, when the node config does not say.
const defaultPrefetch = 4

// runScheduler runs the scheduling driver (node/scheduler/driver) while
// this node leads: it wires the replicated state, gossip's view of the
// workers, and the leader-bound Apply.
func (n *Node) runScheduler(ctx context.Context) {
	prefetch := n.cfg.Prefetch
	if prefetch == 0 {
		prefetch = defaultPrefetch
	}
	if prefetch < 0 {
		prefetch = 0
	}
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
		Prefetch:      map[string]int{"wasm": prefetch},
	})
	d.Run(ctx)
}

// workers is gossip's view of the nodes, for the scheduler.
func (n *Node) workers() []driver.Worker {
	ms := n.cluster.Members()
	out := make([]driver.Worker, 0, len(ms))
	for _, m := range ms {
		out = append(out, driver.Worker{ID: m.ID, Alive: m.State == cluster.StateAlive, Slots: m.Capacity, Labels: m.Labels})
	}
	return out
}
