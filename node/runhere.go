package node

import (
	"context"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/node/scheduler"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// runHere lets the API run a short job on this node before it is
// accepted (api.RunHerer; node/api/runhere.go says why and when).
type runHere struct{ n *Node }

// supportTTL is how long a node trusts its last reading of whether every
// member applies RunHere entries (a reading walks the member list; the
// leader checks again as it proposes: cluster.applyLocal).
const supportTTL = 250 * time.Millisecond

// Ready reports whether this node may take a job with constraints now:
// every member applies RunHere entries, the worker offers slots (it has
// recovered and is not stopping), it has not announced a stop or leave,
// the cluster does not refuse this node,
// its own record takes new work, the policy lets it work, and its labels
// match.
func (r runHere) Ready(constraints map[string]string) bool {
	n := r.n
	if n.refused.Load() || n.slots <= 0 || n.cluster.Departing() || !n.runHereSupported() {
		return false
	}
	n.metaMu.Lock()
	ready := n.workerReady
	var labels map[string]string
	if ready && len(constraints) > 0 {
		labels = n.meta().Labels
	}
	n.metaMu.Unlock()
	if !ready || len(constraints) > 0 && !scheduler.Matches(labels, constraints) {
		return false
	}
	m, ok := n.store.State().Member("node", n.state.NodeID)
	if !ok || m.Revoked || m.Ineligible || m.Draining {
		return false
	}
	return n.authz.NodeWork(identity.Principal{Kind: identity.KindNode, ID: n.state.NodeID}, policy.ActionWorkerHeartbeat, "") == nil
}

// RunHere runs j on this node's worker if a slot is free now.
func (r runHere) RunHere(ctx context.Context, j consensus.Job) (*raftpb.FinishJob, bool) {
	return r.n.worker.RunHere(ctx, j)
}

// runHereSupported is AllSupport(FeatureRunHere), read at most once per
// supportTTL.
func (n *Node) runHereSupported() bool {
	now := time.Now().UnixNano()
	if at := n.runHereAt.Load(); at != 0 && now-at < int64(supportTTL) {
		return n.runHereOK.Load()
	}
	ok := n.cluster.AllSupport(cluster.FeatureRunHere)
	n.runHereOK.Store(ok)
	n.runHereAt.Store(now)
	return ok
}

// Recorded counts the runs made here, recorded or dropped; a recorded
// one counts as a worker run too (palyra_worker_runs_total and its
// durations), a dropped one not: its job runs again, and that run counts.
func (r runHere) Recorded(run *raftpb.RunHere, ran bool) {
	outcome := "recorded"
	if !ran {
		outcome = "dropped"
	}
	r.n.metrics.runHere.WithLabelValues(outcome).Inc()
	if !ran {
		return
	}
	j, fin := run.GetSubmit().GetJob(), run.GetFinish()
	var submitted time.Time
	if at := j.GetSubmittedAtMs(); at > 0 {
		submitted = time.UnixMilli(at)
	}
	r.n.metrics.observeRun(j.GetKind(), fin.GetOk(), time.Duration(fin.GetRanUs())*time.Microsecond, submitted)
}

// runHereLimit is the worker's RunHereLimit: the default, or 2 s in an
// in-process test cluster (Fast), where a run under -race on a loaded
// machine can take longer than 50 ms and its module would then not run
// here for ten minutes.
func (n *Node) runHereLimit() time.Duration {
	if n.cfg.Fast {
		return 2 * time.Second
	}
	return 0
}
