package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Error codes peer RPC adds to consensus's.
const (
	codePermissionDenied = "permission_denied"
	codeUnavailable      = "unavailable"
	codeInvalid          = "invalid_argument"
	codeInternal         = "internal"
	codeFailedPrecond    = "failed_precondition"
	// codeUnknownOutcome: a write may or may not have committed (consensus
	// may report it under this code or as unavailable).
	codeUnknownOutcome = "unknown_outcome"
)

// handlerTimeout bounds the work one peer RPC may cause.
const handlerTimeout = 30 * time.Second

// serveRPC answers one peer RPC stream: one request, one response. Only
// node principals may call; anyone else gets permission_denied before a
// byte of their request is read.
func (c *Cluster) serveRPC(conn net.Conn, p mesh.PeerInfo) {
	conn.SetDeadline(time.Now().Add(handlerTimeout))
	pr, err := nodePrincipal(p)
	if err != nil {
		c.log.Warn("refused peer RPC", "remote", p.Addr.String(), "err", err)
		writeFrame(conn, &peerpb.Response{Error: &peerpb.Error{Code: codePermissionDenied,
			Message: "peer RPC is only for cluster nodes: " + err.Error(),
			Hint:    "use the API; node-to-node calls need a node certificate"}})
		return
	}
	var req peerpb.Request
	if err := readFrame(conn, &req); err != nil {
		c.log.Debug("bad peer RPC request", "peer", pr.String(), "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, handlerTimeout)
	defer cancel()
	resp := c.handle(ctx, pr, &req)
	if err := writeFrame(conn, resp); err != nil {
		c.log.Debug("peer RPC reply not sent", "peer", pr.String(), "err", err)
	}
}

// handle dispatches one request from node principal pr.
func (c *Cluster) handle(ctx context.Context, pr identity.Principal, req *peerpb.Request) *peerpb.Response {
	switch b := req.Body.(type) {
	case *peerpb.Request_ForwardApply:
		return c.handleForwardApply(ctx, pr, b.ForwardApply)
	case *peerpb.Request_RenewLeases:
		return c.handleRenewLeases(pr, b.RenewLeases)
	case *peerpb.Request_RaftJoin:
		return c.handleRaftJoin(pr, b.RaftJoin)
	case *peerpb.Request_RaftStats:
		return &peerpb.Response{Body: &peerpb.Response_RaftStats{RaftStats: c.localStats()}}
	case *peerpb.Request_Leave:
		return c.handleLeave(pr, b.Leave)
	case *peerpb.Request_ReadIndex:
		return c.handleReadIndex(ctx)
	case *peerpb.Request_CaKeys:
		return c.handleCAKeys(ctx, pr)
	case *peerpb.Request_JobOutput:
		return c.handleJobOutput(ctx, pr, b.JobOutput)
	case *peerpb.Request_BrowserSession:
		return c.handleBrowserSession(ctx, pr, b.BrowserSession)
	default:
		return errResp(codeInvalid, "unknown peer RPC request", "the caller runs a newer version; upgrade this node")
	}
}

func errResp(code, msg, hint string) *peerpb.Response {
	return &peerpb.Response{Error: &peerpb.Error{Code: code, Message: msg, Hint: hint}}
}

// notLeaderResp tells the caller where the leader is (if known).
func (c *Cluster) notLeaderResp() *peerpb.Response {
	addr, id := c.store.Leader()
	return &peerpb.Response{Error: &peerpb.Error{Code: consensus.ErrNotLeader.Code,
		Message: "not the leader", Hint: "retry on the leader", LeaderId: id, LeaderAddress: addr}}
}

// toPBError converts an error into the wire form, keeping consensus codes.
func toPBError(err error) *peerpb.Error {
	var ce *consensus.Error
	if errors.As(err, &ce) {
		return &peerpb.Error{Code: ce.Code, Message: ce.Message, Hint: ce.Hint}
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return &peerpb.Error{Code: consensus.ErrNotLeader.Code, Message: err.Error(), Hint: "retry on the new leader"}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrRaftShutdown):
		return &peerpb.Error{Code: codeUnavailable, Message: err.Error(), Hint: "retry"}
	}
	return &peerpb.Error{Code: codeInternal, Message: err.Error()}
}

func (c *Cluster) handleForwardApply(ctx context.Context, pr identity.Principal, r *peerpb.ForwardApplyRequest) *peerpb.Response {
	if r.GetCommand() == nil {
		return errResp(codeInvalid, "forwarded apply carries no command", "")
	}
	batch := r.Command.GetBatch()
	cmds := []*raftpb.Command{r.Command}
	if batch != nil {
		cmds = batch.Commands
		if len(cmds) == 0 {
			return errResp(codeInvalid, "forwarded batch is empty", "")
		}
	}
	for _, cmd := range cmds {
		if batch != nil && !consensus.Batchable(cmd) {
			return errResp(codeInvalid, fmt.Sprintf("a forwarded batch carries a command that may not be batched (%T)", cmd.GetCmd()), "send it on its own")
		}
		if err := mayForward(pr, cmd); err != nil {
			c.log.Warn("refused a forwarded command", "peer", pr.String(), "err", err)
			return errResp(codePermissionDenied, err.Error(), "a node may report only its own work")
		}
		if err := c.mayReport(pr, cmd); err != nil {
			c.log.Warn("refused a node's report by the policy", "peer", pr.String(), "err", err)
			return errResp(codePermissionDenied, err.Error(), "the cluster's policy decides which nodes work ('palyra policy get')")
		}
	}
	// A job the policy does not let its node record as run there is
	// submitted as usual, its run dropped; the other commands stand.
	var refused error
	for i, cmd := range cmds {
		if rh := cmd.GetRunHere(); rh != nil {
			if err := c.mayRunHere(pr, rh); err != nil {
				refused = err
				cmds[i] = withoutRunHere(cmd)
			}
		}
	}
	if refused != nil {
		if c.logPolicyRefusal(pr.ID) {
			c.log.Warn("a node's run of a job before its acceptance refused by the policy; the job is submitted as usual (said once a minute per node)", "peer", pr.String(), "err", refused)
		}
		if batch != nil {
			r = &peerpb.ForwardApplyRequest{Command: &raftpb.Command{Cmd: &raftpb.Command_Batch{Batch: &raftpb.CommandBatch{Commands: cmds}}}}
		} else {
			r = &peerpb.ForwardApplyRequest{Command: cmds[0]}
		}
	}
	if !c.store.IsLeader() {
		return c.notLeaderResp()
	}
	if batch != nil && !c.canBatch() { // a member cannot apply batches: one entry each
		return &peerpb.Response{Body: &peerpb.Response_ForwardApply{ForwardApply: &peerpb.ForwardApplyResponse{Results: batchResults(c.applyEach(ctx, cmds))}}}
	}
	res, err := c.applyLocal(ctx, r.Command)
	if err == nil && batch == nil {
		err = res.Err
	}
	if err != nil {
		if errors.Is(err, consensus.ErrNotLeader) {
			return c.notLeaderResp()
		}
		return &peerpb.Response{Error: toPBError(err)}
	}
	if batch != nil {
		if len(res.Each) != len(cmds) {
			return errResp(codeInternal, fmt.Sprintf("the batch of %d commands was applied as %d", len(cmds), len(res.Each)), "")
		}
		return &peerpb.Response{Body: &peerpb.Response_ForwardApply{ForwardApply: &peerpb.ForwardApplyResponse{Results: batchResults(res.Each)}}}
	}
	return &peerpb.Response{Body: &peerpb.Response_ForwardApply{ForwardApply: &peerpb.ForwardApplyResponse{Job: consensus.JobRecord(&res.Job)}}}
}

// handleRaftJoin adds the caller as a non-voter. A node may only add
// itself; re-joining with the same id and address changes nothing.
func (c *Cluster) handleRaftJoin(pr identity.Principal, r *peerpb.RaftJoinRequest) *peerpb.Response {
	if r.Id != pr.ID {
		c.log.Warn("refused raft join for another node", "caller", pr.String(), "id", r.Id)
		return errResp(codePermissionDenied, "a node may only join as itself ("+pr.ID+"), not as "+r.Id, "")
	}
	if err := c.nodeWork(pr, policy.ActionRaftJoin, ""); err != nil {
		c.log.Warn("refused raft join by the policy", "caller", pr.String(), "err", err)
		return errResp(codePermissionDenied, err.Error(), "the cluster's policy decides which nodes join raft ('palyra policy get')")
	}
	if r.Address == "" {
		return errResp(codeInvalid, "raft join without an address", "")
	}
	if !c.leaderReady.Load() {
		return c.notLeaderResp()
	}
	conf, err := c.raftServers()
	if err != nil {
		return &peerpb.Response{Error: toPBError(err)}
	}
	if s, ok := conf[r.Id]; ok && s.Address == r.Address {
		c.clearDeparting(r.Id)
		return &peerpb.Response{Body: &peerpb.Response_RaftJoin{RaftJoin: &peerpb.RaftJoinResponse{AlreadyMember: true}}}
	}
	if err := c.ap.AddServer(&autopilot.Server{ID: raftID(r.Id), Address: raftAddr(r.Address)}); err != nil {
		return &peerpb.Response{Error: toPBError(err)}
	}
	c.clearDeparting(r.Id)
	c.log.Info("node joined raft as non-voter", "peer", r.Id, "address", r.Address)
	c.kickHousekeeping()
	return &peerpb.Response{Body: &peerpb.Response_RaftJoin{RaftJoin: &peerpb.RaftJoinResponse{}}}
}

func (c *Cluster) clearDeparting(id string) {
	c.mu.Lock()
	delete(c.departing, id)
	c.mu.Unlock()
}

// handleLeave removes the caller from the raft configuration. The leader
// never removes itself here: a leaving leader hands leadership over first.
func (c *Cluster) handleLeave(pr identity.Principal, r *peerpb.LeaveRequest) *peerpb.Response {
	if r.Id != pr.ID {
		c.log.Warn("refused leave for another node", "caller", pr.String(), "id", r.Id)
		return errResp(codePermissionDenied, "a node may only remove itself ("+pr.ID+"), not "+r.Id, "")
	}
	if !c.store.IsLeader() {
		return c.notLeaderResp()
	}
	if r.Id == c.cfg.NodeID {
		return errResp(codeInvalid, "the leader cannot remove itself", "transfer leadership first")
	}
	c.mu.Lock()
	c.departing[r.Id] = time.Now()
	c.mu.Unlock()
	if err := c.ap.RemoveServer(raftID(r.Id)); err != nil {
		return &peerpb.Response{Error: toPBError(err)}
	}
	c.log.Info("node left raft", "peer", r.Id)
	c.kickHousekeeping()
	return &peerpb.Response{Body: &peerpb.Response_Leave{Leave: &peerpb.LeaveResponse{}}}
}

// handleReadIndex returns the index a follower must apply before its
// local state is linearizable: everything this leader acknowledged, taken
// before confirming with a quorum that it still leads.
func (c *Cluster) handleReadIndex(ctx context.Context) *peerpb.Response {
	if !c.leaderReady.Load() {
		return c.notLeaderResp()
	}
	idx := c.store.State().AppliedIndex()
	if err := c.verifyLeader(ctx); err != nil {
		if unknownOutcome(err) || errors.Is(err, consensus.ErrNotLeader) {
			// Stepped down while confirming: nothing was written, the
			// caller asks the new leader.
			return c.notLeaderResp()
		}
		return &peerpb.Response{Error: toPBError(err)}
	}
	return &peerpb.Response{Body: &peerpb.Response_ReadIndex{ReadIndex: &peerpb.ReadIndexResponse{Index: idx}}}
}

func statsRequest() *peerpb.Request {
	return &peerpb.Request{Body: &peerpb.Request_RaftStats{RaftStats: &peerpb.RaftStatsRequest{}}}
}

// localStats reads this server's raft figures for autopilot.
func (c *Cluster) localStats() *peerpb.RaftStatsResponse {
	st := c.raft.Stats()
	term, _ := strconv.ParseUint(st["last_log_term"], 10, 64)
	index, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
	contact := int64(-1)
	switch v := st["last_contact"]; v {
	case "never":
	case "0":
		contact = 0
	default:
		if d, err := time.ParseDuration(v); err == nil {
			contact = int64(d)
		}
	}
	return &peerpb.RaftStatsResponse{Id: c.cfg.NodeID, LastTerm: term, LastIndex: index, LastContactNs: contact,
		AppliedIndex: c.store.Raft().AppliedIndex()} // raft's: counts no-op and configuration entries, as the leader's last index does
}
