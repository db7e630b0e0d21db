package node

import (
	"context"
	"errors"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/node/scheduler"
)

// runScheduler places queued jobs while this node is the leader, on every
// state change and membership change (and on a slow tick as a backstop).
func (n *Node) runScheduler(ctx context.Context) {
	leader := n.store.LeadershipChanges()
	members := n.cluster.Changes()
	isLeader := n.store.IsLeader()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		var changed <-chan struct{}
		if isLeader {
			changed = n.store.State().Changed()
			n.schedule(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case isLeader = <-leader:
		case <-changed:
		case <-members:
		case <-tick.C:
		}
	}
}

// placementNodes describes the live, eligible workers for the planner.
func placementNodes(members []cluster.Member, running map[string]map[string]int) []scheduler.Node {
	var out []scheduler.Node
	for _, m := range members {
		if m.State != cluster.StateAlive {
			continue
		}
		out = append(out, scheduler.Node{ID: m.ID, Eligible: true, Slots: m.Capacity, Running: running[m.ID], Labels: m.Labels})
	}
	return out
}

// schedule commits one round of placements.
func (n *Node) schedule(ctx context.Context) {
	st := n.store.State()
	queued := st.Jobs(consensus.JobFilter{Phase: consensus.PhaseQueued})
	if len(queued) == 0 {
		return
	}
	running := map[string]map[string]int{}
	for _, j := range st.Jobs(consensus.JobFilter{Phase: consensus.PhaseRunning}) {
		if running[j.NodeID] == nil {
			running[j.NodeID] = map[string]int{}
		}
		running[j.NodeID][j.Kind]++
	}
	jobs := make([]scheduler.Job, len(queued))
	for i, j := range queued {
		jobs[i] = scheduler.Job{ID: j.ID, Kind: j.Kind, Attempt: j.Attempt, Order: j.CommitIndex}
	}
	plan, _ := scheduler.Plan(placementNodes(n.cluster.Members(), running), jobs)
	now := time.Now().UnixMilli()
	for _, p := range plan {
		_, err := n.store.Apply(ctx, assignCmd(p, now))
		if err != nil && !errors.Is(err, consensus.ErrConflict) && !errors.Is(err, consensus.ErrStaleAttempt) {
			n.log.Warn("placement not committed", "job", p.JobID, "err", err)
			return
		}
	}
}
