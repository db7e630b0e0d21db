package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// mayForward checks a command a node forwarded against that node's
// certificate identity, where it enters the cluster. Commands on behalf of
// API callers were authorised by the forwarding node; the commands of a
// worker (results, key-value writes, giving work back) must name the
// caller as the node the attempt was given to, so one node cannot record
// another's result; scheduling is the leader's own and is never forwarded.
// The FSM then checks that the attempt is current.
func mayForward(pr identity.Principal, cmd *raftpb.Command) error {
	mine := func(what, node string) error {
		if node != pr.ID {
			return fmt.Errorf("%s sent %s for node %q: a node reports only its own work", pr, what, node)
		}
		return nil
	}
	switch c := cmd.Cmd.(type) {
	case *raftpb.Command_FinishJob:
		return mine("a result", c.FinishJob.NodeId)
	case *raftpb.Command_FinishBatch:
		for _, r := range c.FinishBatch.Results {
			if err := mine("a result", r.NodeId); err != nil {
				return err
			}
		}
	case *raftpb.Command_RequeueJob:
		return mine("a requeue", c.RequeueJob.NodeId)
	case *raftpb.Command_RunHere:
		// A job run where it was submitted: by the forwarding node only.
		return mine("a job it ran", c.RunHere.NodeId)
	case *raftpb.Command_KvPut:
		return kvWriter(pr, mine, "write", c.KvPut.JobId, c.KvPut.By, c.KvPut.NodeId)
	case *raftpb.Command_KvDelete:
		return kvWriter(pr, mine, "delete", c.KvDelete.JobId, c.KvDelete.By, c.KvDelete.NodeId)
	case *raftpb.Command_SchedulerRound, *raftpb.Command_AssignJob, *raftpb.Command_AssignBatch:
		return fmt.Errorf("%s sent a placement: only the leader schedules", pr)
	}
	return nil
}

// kvWriter checks a forwarded key-value write: either a job's (it names
// the job and the forwarding node, and no caller) or an API caller's (it
// names the caller, by, and no job: palyra kv put, authorised by the
// forwarding node as every command on behalf of a caller is).
func kvWriter(pr identity.Principal, mine func(what, node string) error, op, job, by, node string) error {
	switch {
	case job != "" && by != "":
		return fmt.Errorf("%s sent a key-value %s for job %s that also names a caller: a write is a job's or a caller's", pr, op, job)
	case job == "" && by != "":
		return nil
	case job == "":
		return fmt.Errorf("%s sent a key-value %s for no job and no caller: only jobs and operators write there", pr, op)
	}
	return mine("a key-value "+op, node)
}

// LeaseKeeper renews, on the leader, the leases of the placements node
// says it holds. It returns those that are not node's any more (the
// worker stops them) and the leases' time to live.
type LeaseKeeper func(node string, held []*peerpb.LeaseRef) (lost []*peerpb.LeaseRef, ttl time.Duration)

// SetLeaseKeeper installs (or, with nil, removes) the leader's lease
// keeper.
func (c *Cluster) SetLeaseKeeper(k LeaseKeeper) {
	if k == nil {
		c.leases.Store(nil)
		return
	}
	c.leases.Store(&k)
}

// handleRenewLeases renews the calling node's leases: the caller's
// certificate names the node, so no node renews another's.
func (c *Cluster) handleRenewLeases(pr identity.Principal, r *peerpb.RenewLeasesRequest) *peerpb.Response {
	if !c.store.IsLeader() {
		return c.notLeaderResp()
	}
	if err := c.nodeWork(pr, policy.ActionWorkerHeartbeat, ""); err != nil {
		if c.logPolicyRefusal(pr.ID) {
			c.log.Warn("refused a lease renewal by the policy (said once a minute per node)", "caller", pr.String(), "err", err)
		}
		return errResp(codePermissionDenied, err.Error(), "the cluster's policy decides which nodes work ('palyra policy get')")
	}
	k := c.leases.Load()
	if k == nil {
		return errResp(codeUnavailable, "the leader is not scheduling yet", "retry in a moment")
	}
	lost, ttl := (*k)(pr.ID, r.Held)
	return &peerpb.Response{Body: &peerpb.Response_RenewLeases{RenewLeases: &peerpb.RenewLeasesResponse{Lost: lost, TtlMs: ttl.Milliseconds()}}}
}

// RenewLeases renews this node's leases with the leader (wherever it is)
// and returns the placements that are not this node's any more, and the
// leases' time to live.
func (c *Cluster) RenewLeases(ctx context.Context, held []*peerpb.LeaseRef) (lost []*peerpb.LeaseRef, ttl time.Duration, err error) {
	req := &peerpb.Request{Body: &peerpb.Request_RenewLeases{RenewLeases: &peerpb.RenewLeasesRequest{Held: held}}}
	err = c.onLeader(ctx, true, func(context.Context) error {
		k := c.leases.Load()
		if k == nil {
			return &consensus.Error{Code: codeUnavailable, Message: "the leader is not scheduling yet", Hint: "retry in a moment"}
		}
		lost, ttl = (*k)(c.cfg.NodeID, held)
		return nil
	}, req, func(resp *peerpb.Response) error {
		r := resp.GetRenewLeases()
		if r == nil {
			return fmt.Errorf("cluster: leader answered a lease renewal without leases")
		}
		lost, ttl = r.Lost, time.Duration(r.TtlMs)*time.Millisecond
		return nil
	})
	return lost, ttl, err
}

// nodeWork asks the configured policy whether pr may do action (nil
// NodeWork: allowed).
func (c *Cluster) nodeWork(pr identity.Principal, action, jobID string) error {
	if c.cfg.NodeWork == nil {
		return nil
	}
	return c.cfg.NodeWork(pr, action, jobID)
}

// mayReport checks a forwarded worker command against the policy's
// worker.report, per job it names; other commands pass.
func (c *Cluster) mayReport(pr identity.Principal, cmd *raftpb.Command) error {
	var jobs []string
	switch x := cmd.Cmd.(type) {
	case *raftpb.Command_FinishJob:
		jobs = []string{x.FinishJob.Id}
	case *raftpb.Command_FinishBatch:
		for _, r := range x.FinishBatch.Results {
			jobs = append(jobs, r.Id)
		}
	case *raftpb.Command_RequeueJob:
		jobs = []string{x.RequeueJob.Id}
	case *raftpb.Command_KvPut: // an API caller's write names no job: nothing to report
		if x.KvPut.JobId != "" {
			jobs = []string{x.KvPut.JobId}
		}
	case *raftpb.Command_KvDelete:
		if x.KvDelete.JobId != "" {
			jobs = []string{x.KvDelete.JobId}
		}
	}
	for _, id := range jobs {
		if err := c.nodeWork(pr, policy.ActionWorkerReport, id); err != nil {
			return err
		}
	}
	return nil
}

// mayRunHere checks by the policy that pr may record a job it ran before
// the job was accepted: that it takes new work (worker.heartbeat) and may
// report that job (worker.report, on the job as its submission describes
// it). A refusal does not refuse the submission (the caller's, authorised
// by the forwarding node): handleForwardApply submits the job as usual.
func (c *Cluster) mayRunHere(pr identity.Principal, rh *raftpb.RunHere) error {
	if err := c.nodeWork(pr, policy.ActionWorkerHeartbeat, ""); err != nil {
		return err
	}
	j := rh.GetSubmit().GetJob()
	if j == nil {
		return nil // refused by the FSM as any empty submission
	}
	if c.cfg.NodeWorkOn != nil {
		return c.cfg.NodeWorkOn(pr, policy.ActionWorkerReport, j.Id, j.Submitter, j.Kind)
	}
	return c.nodeWork(pr, policy.ActionWorkerReport, j.Id)
}

// logPolicyRefusal reports whether a policy refusal of node's work should
// be logged now: once a minute per node (a refused worker keeps asking).
func (c *Cluster) logPolicyRefusal(node string) bool {
	now := time.Now()
	if last, ok := c.policyLogged.Load(node); ok && now.Sub(last.(time.Time)) < time.Minute {
		return false
	}
	c.policyLogged.Store(node, now)
	return true
}
