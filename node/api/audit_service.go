package api

import (
	"context"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// auditService serves the replicated audit journal. Every replica holds
// the same chain (the FSM appends it), so any node can list and verify
// it; reads are made linearizable first (a list may ask for a stale one).
type auditService struct{ s *Server }

const maxAuditPage = 1000

func (as auditService) ListAudit(ctx context.Context, req *connect.Request[palyrav1.ListAuditRequest]) (*connect.Response[palyrav1.ListAuditResponse], error) {
	s, m := as.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionAuditRead, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if _, err := s.staleableRead(ctx, m.Stale); err != nil {
		return nil, err
	}
	limit := int(m.Limit)
	if limit <= 0 || limit > maxAuditPage {
		limit = maxAuditPage
	}
	st := s.control.State()
	recs, baseSeq, baseHash, more := st.Journal(m.AfterSeq, m.SinceMs, limit)
	headSeq, headHash := st.JournalHead()
	resp := &palyrav1.ListAuditResponse{BaseSeq: baseSeq, BaseSha256: baseHash, HeadSeq: headSeq, HeadSha256: headHash, More: more}
	for _, r := range recs {
		resp.Records = append(resp.Records, consensus.AuditRecordPB(r))
	}
	return connect.NewResponse(resp), nil
}

func (as auditService) VerifyAudit(ctx context.Context, _ *connect.Request[palyrav1.VerifyAuditRequest]) (*connect.Response[palyrav1.VerifyAuditResponse], error) {
	s := as.s
	if err := s.authz.Check(ctx, policy.ActionAuditRead, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if err := s.control.VerifyRead(ctx); err != nil {
		return nil, fromErr(err)
	}
	st := s.control.State()
	n, bad, problem := st.VerifyJournal()
	headSeq, headHash := st.JournalHead()
	_, baseSeq, _, _ := st.Journal(headSeq, 0, 0)
	return connect.NewResponse(&palyrav1.VerifyAuditResponse{Ok: bad == 0, Records: uint64(n), HeadSeq: headSeq, HeadSha256: headHash,
		FirstBadSeq: bad, Problem: problem, ServedBy: s.info.NodeID, BaseSeq: baseSeq}), nil
}
