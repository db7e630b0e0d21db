package driver

import (
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Lease names one placement: a job and the attempt given to a worker.
type Lease struct {
	JobID   string
	Attempt uint32
}

// lease is the leader's record of one placement's lease. Leases live in
// the leader's memory, not in Raft: a renewal is a call, never a commit. A
// new leader knows none and starts every running placement's lease afresh
// (a grace of one TTL after a leader change).
type lease struct {
	node    string
	attempt uint32
	until   time.Time
}

// leaseCheckEvery bounds how often a round looks for lapsed leases.
const leaseCheckEvery = 250 * time.Millisecond

// DefaultLeaseTTL is how long a placement lives without a renewal from its
// worker before it is re-queued.
const DefaultLeaseTTL = 10 * time.Second

// LeaseTTL is the leases' time to live.
func (d *Driver) LeaseTTL() time.Duration { return d.cfg.LeaseTTL }

// Renew renews the leases of the placements node holds and returns those
// that are not node's any more (re-queued, re-placed, cancelled, ended):
// the worker stops them, and their results would be refused anyway.
func (d *Driver) Renew(node string, held []Lease) (lost []Lease) {
	until := d.cfg.Now().Add(d.cfg.LeaseTTL)
	st := d.cfg.State
	d.leaseMu.Lock()
	defer d.leaseMu.Unlock()
	for _, h := range held {
		j, ok := st.Job(h.JobID)
		if !ok || j.Phase != consensus.PhaseRunning || j.Attempt != h.Attempt || j.NodeID != node {
			lost = append(lost, h)
			continue
		}
		d.leases[h.JobID] = lease{node: node, attempt: h.Attempt, until: until}
	}
	delete(d.silent, node) // it renews again: it may take work
	return lost
}

// lapsed appends to round a requeue for every running placement whose
// lease lapsed, and starts the lease of every placement it sees for the
// first time. It forgets the leases of placements that ended.
func (d *Driver) lapsed(round *raftpb.SchedulerRound, now time.Time, nodes []string) {
	if now.Sub(d.lastLeaseCheck) < leaseCheckEvery {
		return
	}
	d.lastLeaseCheck = now
	st := d.cfg.State
	d.leaseMu.Lock()
	defer d.leaseMu.Unlock()
	seen := make(map[string]bool, len(d.leases))
	already := make(map[string]bool, len(round.Requeues)) // queued again in this round for another reason
	for _, r := range round.Requeues {
		already[r.Id] = true
	}
	for _, node := range nodes {
		var ids []string
		reason := "lease lapsed: " + node + " did not renew it for " + d.cfg.LeaseTTL.String()
		for _, j := range st.RunningOn(node) {
			if already[j.ID] {
				seen[j.ID] = true
				continue
			}
			seen[j.ID] = true
			l, ok := d.leases[j.ID]
			if !ok || l.attempt != j.Attempt || l.node != j.NodeID {
				d.leases[j.ID] = lease{node: j.NodeID, attempt: j.Attempt, until: now.Add(d.cfg.LeaseTTL)}
				continue
			}
			if now.After(l.until) && len(round.Requeues) < maxRoundRequeues {
				d.log.Debug("re-queueing job", "job", j.ID, "attempt", j.Attempt, "worker", node, "reason", reason)
				round.Requeues = append(round.Requeues, &raftpb.RequeueJob{Id: j.ID, Attempt: j.Attempt, Reason: reason})
				ids = append(ids, j.ID)
				delete(d.leases, j.ID)
				d.silent[node] = true // no new work until it renews again
			}
		}
		d.logRequeues(node, reason, ids)
	}
	for id := range d.leases {
		if !seen[id] {
			delete(d.leases, id)
		}
	}
}

// isSilent reports whether node let a lease lapse and has not renewed
// since: it gets no new work (it is paused, stuck or cut off, though
// gossip may still see it alive).
func (d *Driver) isSilent(node string) bool {
	d.leaseMu.Lock()
	defer d.leaseMu.Unlock()
	return d.silent[node]
}
