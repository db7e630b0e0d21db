package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Retention bounds: shorter than a minute would prune results before a
// client had a fair chance to read them.
const (
	MinRetention = time.Minute
	MaxRetention = 10 * 365 * 24 * time.Hour
	// pruneBatch is the most jobs one PruneJobs entry removes (a whole
	// array is never split, so one entry may remove more).
	pruneBatch = 10_000
)

// PruneJobs removes jobs that ended more than older_than_ms ago, in
// entries of at most pruneBatch jobs, until none is left. The cut-off is
// fixed once, from this node's clock, so a retried entry removes nothing
// more than the first would have.
func (js jobService) PruneJobs(ctx context.Context, req *connect.Request[palyrav1.PruneJobsRequest]) (*connect.Response[palyrav1.PruneJobsResponse], error) {
	s := js.s
	now, before, err := js.pruneCutoff(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	caller, _ := PrincipalFrom(ctx)
	cmd := &raftpb.Command{Cmd: &raftpb.Command_PruneJobs{PruneJobs: &raftpb.PruneJobs{
		BeforeMs: before, Max: pruneBatch, AtMs: now, By: caller.String()}}}
	var total uint64
	for {
		res, err := s.control.Apply(ctx, cmd)
		// Pruning to a fixed cut-off is safe to apply twice.
		for retry := 0; retry < 3 && errors.Is(err, consensus.ErrUnknownOutcome); retry++ {
			res, err = s.control.Apply(ctx, cmd)
		}
		if err != nil {
			if total > 0 {
				s.log.Warn("prune interrupted", "pruned", total, "err", err)
			}
			return nil, fromErr(err)
		}
		// A PruneJobs entry reports how many jobs it removed in the
		// result's Attempt (consensus.applyPrune).
		n := uint64(res.Attempt)
		total += n
		if n < pruneBatch {
			break
		}
	}
	s.log.Info("jobs pruned", "pruned", total, "before", rfc3339(before), "by", caller.String())
	return connect.NewResponse(&palyrav1.PruneJobsResponse{Pruned: total, BeforeMs: before}), nil
}

// CountPrunableJobs says how many jobs PruneJobs would remove now,
// removing nothing. Counted on this replica, which may lag the leader by
// a few entries: a count, not a promise.
func (js jobService) CountPrunableJobs(ctx context.Context, req *connect.Request[palyrav1.PruneJobsRequest]) (*connect.Response[palyrav1.PruneJobsResponse], error) {
	_, before, err := js.pruneCutoff(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&palyrav1.PruneJobsResponse{Pruned: js.s.control.State().EndedBefore(before), BeforeMs: before}), nil
}

// pruneCutoff checks a prune (or its count) may be asked, and returns
// this node's time and the cut-off: jobs that ended before it go.
func (js jobService) pruneCutoff(ctx context.Context, m *palyrav1.PruneJobsRequest) (now, before int64, err error) {
	if err := js.s.authz.Check(ctx, policy.ActionJobPrune, policy.ClusterResource(), nil); err != nil {
		return 0, 0, err
	}
	if m.OlderThanMs < 0 {
		return 0, 0, invalid("older_than must not be negative", "e.g. --older-than 24h (0: every ended job)")
	}
	now = js.s.now().UnixMilli()
	return now, now - m.OlderThanMs, nil
}

// SetRetention sets how long ended jobs are kept; the leader prunes older
// ones by itself.
func (js jobService) SetRetention(ctx context.Context, req *connect.Request[palyrav1.SetRetentionRequest]) (*connect.Response[palyrav1.SetRetentionResponse], error) {
	s := js.s
	if err := s.authz.Check(ctx, policy.ActionJobPrune, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	ms := req.Msg.RetentionMs
	// Compared in milliseconds: as a time.Duration, a huge value wraps
	// around and may land in range.
	if ms != 0 && (ms < MinRetention.Milliseconds() || ms > MaxRetention.Milliseconds()) {
		shown := palyrav1.FormatRetention(ms)
		if ms > math.MaxInt64/int64(time.Millisecond) {
			shown = fmt.Sprintf("of %d ms", ms)
		}
		return nil, invalid(fmt.Sprintf("retention %s is out of range", shown),
			fmt.Sprintf("use between %s and %s, e.g. 7d; 'palyra job retention default' (retention_ms 0 in the API) restores the default, %s",
				palyrav1.FormatRetention(MinRetention.Milliseconds()), palyrav1.FormatRetention(MaxRetention.Milliseconds()), palyrav1.FormatRetention(consensus.DefaultRetentionMS)))
	}
	caller, _ := PrincipalFrom(ctx)
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SetRetention{SetRetention: &raftpb.SetRetention{
		RetentionMs: ms, AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil {
		return nil, fromErr(err)
	}
	if ms == 0 {
		ms = consensus.DefaultRetentionMS
	}
	s.log.Info("retention set", "retention", palyrav1.FormatRetention(ms), "by", caller.String())
	return connect.NewResponse(&palyrav1.SetRetentionResponse{RetentionMs: ms}), nil
}

func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }
