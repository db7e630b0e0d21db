package node

import (
	"context"
	"errors"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/node/scheduler"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// deadWorkerGrace is how long this leader must have seen a worker dead
// before its running jobs are re-queued. Gossip already waits for its own
// suspicion timeout; the grace also covers a new leader whose gossip view
// is still filling in, so it does not re-queue work on healthy nodes.
const deadWorkerGrace = 3 * time.Second

// maxReasonUpdates bounds pending-reason writes per round.
const maxReasonUpdates = 64

// schedState is the leader's memory between rounds (not replicated: a new
// leader starts afresh, which only delays re-queueing by the grace).
type schedState struct {
	leaderSince time.Time
	deadSince   map[string]time.Time
}

// runScheduler places queued jobs while this node is the leader, on every
// state change and membership change (and on a tick, for timers).
func (n *Node) runScheduler(ctx context.Context) {
	leader := n.store.LeadershipChanges()
	members := n.cluster.Changes()
	isLeader := n.store.IsLeader()
	ss := &schedState{deadSince: map[string]time.Time{}, leaderSince: time.Now()}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		var changed <-chan struct{}
		if isLeader {
			changed = n.store.State().Changed()
			n.maintain(ctx, ss)
			n.schedule(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case l := <-leader:
			if l && !isLeader {
				ss.leaderSince, ss.deadSince = time.Now(), map[string]time.Time{}
			}
			isLeader = l
		case <-changed:
		case <-members:
		case <-tick.C:
		}
	}
}

func (n *Node) applyQuiet(ctx context.Context, cmd *raftpb.Command, what string) {
	if _, err := n.store.Apply(ctx, cmd); err != nil && !errors.Is(err, consensus.ErrConflict) && !errors.Is(err, consensus.ErrStaleAttempt) {
		n.log.Warn(what+" not committed", "err", err)
	}
}

// maintain moves work off dead and drained workers and expires jobs past
// their deadline.
func (n *Node) maintain(ctx context.Context, ss *schedState) {
	st := n.store.State()
	now := time.Now()
	alive := map[string]bool{}
	for _, m := range n.cluster.Members() {
		if m.State == cluster.StateAlive {
			alive[m.ID] = true
			delete(ss.deadSince, m.ID)
		} else if _, ok := ss.deadSince[m.ID]; !ok {
			ss.deadSince[m.ID] = now
		}
	}
	for _, j := range st.Jobs(consensus.JobFilter{Phase: consensus.PhaseRunning}) {
		if alive[j.NodeID] {
			if m, ok := st.Member("node", j.NodeID); ok && m.Draining && m.DrainDeadlineMS > 0 && now.UnixMilli() >= m.DrainDeadlineMS {
				n.log.Info("drain deadline reached; moving job", "job", j.ID, "node", j.NodeID)
				n.applyQuiet(ctx, requeueCmd(j, "drain deadline reached on "+j.NodeID), "requeue")
			}
			continue
		}
		since, seen := ss.deadSince[j.NodeID]
		if !seen {
			ss.deadSince[j.NodeID] = now
			continue
		}
		if now.Sub(since) >= deadWorkerGrace && now.Sub(ss.leaderSince) >= deadWorkerGrace {
			n.log.Warn("worker is dead; re-queueing its job", "job", j.ID, "attempt", j.Attempt, "node", j.NodeID)
			n.applyQuiet(ctx, requeueCmd(j, "worker "+j.NodeID+" is dead"), "requeue")
		}
	}
	for _, p := range []consensus.Phase{consensus.PhaseQueued, consensus.PhaseRunning} {
		for _, j := range st.Jobs(consensus.JobFilter{Phase: p}) {
			if j.DeadlineAtMS > 0 && now.UnixMilli() >= j.DeadlineAtMS {
				n.applyQuiet(ctx, &raftpb.Command{Cmd: &raftpb.Command_ExpireJob{ExpireJob: &raftpb.ExpireJob{Id: j.ID, AtMs: now.UnixMilli()}}}, "expiry")
			}
		}
	}
}

func requeueCmd(j consensus.Job, reason string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{Id: j.ID, Attempt: j.Attempt, Reason: reason}}}
}

// placementNodes describes live workers for the planner; ineligible and
// draining nodes are listed as not eligible.
func placementNodes(members []cluster.Member, st *consensus.State, running map[string]map[string]int) []scheduler.Node {
	var out []scheduler.Node
	for _, m := range members {
		if m.State != cluster.StateAlive {
			continue
		}
		eligible := true
		if rec, ok := st.Member("node", m.ID); ok && (rec.Ineligible || rec.Draining || rec.Revoked) {
			eligible = false
		}
		out = append(out, scheduler.Node{ID: m.ID, Eligible: eligible, Slots: m.Capacity, Running: running[m.ID], Labels: m.Labels})
	}
	return out
}

// schedule commits one round of placements and records why the rest wait.
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
	nowMS := time.Now().UnixMilli()
	var jobs []scheduler.Job
	byID := map[string]consensus.Job{}
	for _, j := range queued {
		if j.NotBeforeMS > nowMS {
			continue // retry backoff
		}
		byID[j.ID] = j
		jobs = append(jobs, scheduler.Job{ID: j.ID, Kind: j.Kind, Attempt: j.Attempt, Order: j.CommitIndex,
			Priority: int(j.Priority), Constraints: j.Constraints})
	}
	plan, unplaced := scheduler.Plan(placementNodes(n.cluster.Members(), st, running), jobs)
	if len(plan) > 0 {
		batch := &raftpb.AssignBatch{}
		for _, p := range plan {
			batch.Assignments = append(batch.Assignments, &raftpb.AssignJob{Id: p.JobID, Attempt: p.Attempt, NodeId: p.NodeID, AtMs: nowMS})
		}
		_, err := n.store.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_AssignBatch{AssignBatch: batch}})
		if err != nil && !errors.Is(err, consensus.ErrConflict) {
			n.log.Warn("placements not committed", "jobs", len(plan), "err", err)
			return
		}
	}
	updates := 0
	for _, u := range unplaced {
		if byID[u.JobID].PendingReason == u.Reason || updates >= maxReasonUpdates {
			continue
		}
		updates++
		n.applyQuiet(ctx, &raftpb.Command{Cmd: &raftpb.Command_SetPendingReason{SetPendingReason: &raftpb.SetPendingReason{Id: u.JobID, Reason: u.Reason}}}, "pending reason")
	}
}
