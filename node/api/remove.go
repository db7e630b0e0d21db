package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// raftRemovalWait bounds how long RemoveNode waits to see the node leave
// the raft configuration (the leader removes a revoked node at once).
const raftRemovalWait = 10 * time.Second

// RemoveNode takes a node that is gone for good out of the cluster. It
// revokes the node's certificate (every node then refuses it, and the
// leader drops it from raft; with that data dir it cannot come back),
// re-queues the jobs it was running (the FSM already refuses new
// placements on a revoked node, so the list is complete), and waits a
// little for raft to drop it. A node gossip reports alive is refused
// without Force, and the leader always: it should leave, or be stopped
// first so another takes over.
func (n nodeService) RemoveNode(ctx context.Context, req *connect.Request[palyrav1.RemoveNodeRequest]) (*connect.Response[palyrav1.RemoveNodeResponse], error) {
	s, m := n.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionNodeRemove, policy.ClusterResource(), map[string]any{"target_node": m.NodeId}); err != nil {
		return nil, err
	}
	if m.NodeId == "" {
		return nil, invalid("give the id of the node to remove", "list nodes with 'palyra nodes'")
	}
	var target *cluster.Member
	if s.Members != nil {
		for _, mm := range s.Members() {
			if mm.ID == m.NodeId {
				target = &mm
				break
			}
		}
	}
	rec, registered := s.control.State().Member("node", m.NodeId)
	if target == nil && !registered {
		return nil, apiError(connect.CodeNotFound, "not_found", fmt.Sprintf("no node with id %q in this cluster", m.NodeId), "list nodes with 'palyra nodes'")
	}
	alive := target != nil && target.State == cluster.StateAlive
	if target != nil && target.Leader {
		return nil, apiError(connect.CodeFailedPrecondition, "failed_precondition",
			fmt.Sprintf("node %s leads the cluster", m.NodeId),
			"make it leave with 'palyra --addr "+target.Address+" node leave' (it hands leadership over first), or stop it and remove it once another node leads")
	}
	if m.NodeId == s.info.NodeID {
		return nil, apiError(connect.CodeFailedPrecondition, "failed_precondition",
			fmt.Sprintf("node %s is the node serving this call", m.NodeId),
			"a running node leaves with 'palyra --addr "+s.info.Address+" node leave'; to remove it anyway, ask another node (--addr)")
	}
	if alive && !m.Force {
		return nil, apiError(connect.CodeFailedPrecondition, "failed_precondition",
			fmt.Sprintf("node %s is alive: gossip hears from it at %s", m.NodeId, target.Address),
			"to take a running node out, run 'palyra --addr "+target.Address+" node leave' (its work moves first); to cut it off anyway, add --force")
	}
	resp := &palyrav1.RemoveNodeResponse{NodeId: m.NodeId, WasAlive: alive, AlreadyRemoved: rec.Revoked}
	if target != nil {
		resp.WasVoter = target.Voter
		resp.HeldCa = target.Labels[LabelCAKeys] != ""
	}
	// Every voter holds the CA key; removing one is refused only when no
	// other live node holds it (the last copy). The others are named in
	// the answer, so the CLI warns only when none is left.
	if s.Members != nil {
		for _, mm := range s.Members() {
			if mm.ID != m.NodeId && mm.State == cluster.StateAlive && mm.Labels[LabelCAKeys] != "" {
				resp.CaHolders = append(resp.CaHolders, mm.ID)
			}
		}
	}
	if resp.HeldCa && len(resp.CaHolders) == 0 && !m.Force && !rec.Revoked {
		return nil, apiError(connect.CodeFailedPrecondition, "failed_precondition",
			fmt.Sprintf("node %s is the only node known to hold the cluster CA key: without it no node or device can pair, and certificates cannot be renewed", m.NodeId),
			"bring that node back with 'palyra node start --data-dir DIR' if its data dir survives, or wait for another voter to fetch the key ('palyra ca status'); add --force only if it is lost for good")
	}
	caller, _ := PrincipalFrom(ctx)
	if !rec.Revoked {
		if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{
			Kind: "node", Id: m.NodeId, AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil && !errors.Is(err, consensus.ErrConflict) {
			return nil, fromErr(err)
		}
	}
	// Revoked, the node gets no new placement, and the leader's scheduler
	// re-queues what runs there now in its next round (a node may give
	// back only its own work, so the API node does not requeue it).
	for _, j := range s.control.State().Jobs(consensus.JobFilter{Phase: consensus.PhaseRunning, NodeID: m.NodeId}) {
		resp.Requeued = append(resp.Requeued, j.ID)
	}
	// Its local operator credentials go with it: their keys are on the
	// removed machine's disk. The caller's own is spared (revoking it
	// would lock the caller out mid-operation) and named instead.
	for _, d := range consensus.LocalOperatorsOf(s.control.State().Members("device"), rec) {
		if d.Revoked {
			continue
		}
		if caller.Kind == "device" && caller.ID == d.ID {
			resp.KeptOperator = d.ID
			continue
		}
		if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{
			Kind: "device", Id: d.ID, AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil && !errors.Is(err, consensus.ErrConflict) {
			return nil, fromErr(err)
		}
		resp.RevokedDevices = append(resp.RevokedDevices, d.ID)
	}
	resp.InRaft = s.waitOutOfRaft(ctx, m.NodeId)
	s.log.Warn("node removed", "removed", m.NodeId, "by", caller, "was_alive", alive, "requeued", len(resp.Requeued), "in_raft", resp.InRaft,
		"revoked_devices", resp.RevokedDevices)
	return connect.NewResponse(resp), nil
}

// waitOutOfRaft waits (briefly) until this node's view of the raft
// configuration no longer lists id, and reports whether it still does.
func (s *Server) waitOutOfRaft(ctx context.Context, id string) bool {
	if s.Members == nil {
		return false
	}
	deadline := time.Now().Add(raftRemovalWait)
	for {
		in := false
		for _, mm := range s.Members() {
			in = in || (mm.ID == id && mm.InRaft)
		}
		if !in || time.Now().After(deadline) {
			return in
		}
		select {
		case <-ctx.Done():
			return true
		case <-time.After(50 * time.Millisecond):
		}
	}
}
