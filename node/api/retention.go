package api

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	if err := s.authz.Check(ctx, policy.ActionJobPrune, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if req.Msg.OlderThanMs < 0 {
		return nil, invalid("older_than must not be negative", "e.g. --older-than 24h (0 prunes every ended job)")
	}
	caller, _ := PrincipalFrom(ctx)
	now := s.now().UnixMilli()
	before := now - req.Msg.OlderThanMs
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

// SetRetention sets how long ended jobs are kept; the leader prunes older
// ones by itself.
func (js jobService) SetRetention(ctx context.Context, req *connect.Request[palyrav1.SetRetentionRequest]) (*connect.Response[palyrav1.SetRetentionResponse], error) {
	s := js.s
	if err := s.authz.Check(ctx, policy.ActionJobPrune, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	ms := req.Msg.RetentionMs
	d := time.Duration(ms) * time.Millisecond
	if ms != 0 && (ms < 0 || d < MinRetention || d > MaxRetention) {
		return nil, invalid(fmt.Sprintf("retention %s is out of range", humanDuration(ms)),
			fmt.Sprintf("use between %s and %s, e.g. 7d (0 restores the default, %s)",
				humanDuration(MinRetention.Milliseconds()), humanDuration(MaxRetention.Milliseconds()), humanDuration(consensus.DefaultRetentionMS)))
	}
	caller, _ := PrincipalFrom(ctx)
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SetRetention{SetRetention: &raftpb.SetRetention{
		RetentionMs: ms, AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil {
		return nil, fromErr(err)
	}
	if ms == 0 {
		ms = consensus.DefaultRetentionMS
	}
	s.log.Info("retention set", "retention", humanDuration(ms), "by", caller.String())
	return connect.NewResponse(&palyrav1.SetRetentionResponse{RetentionMs: ms}), nil
}

func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// humanDuration writes ms the way people say retention: "7d", "3d12h",
// "36h", "90m" as "1h30m", "45s".
func humanDuration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d <= 0 || d%time.Second != 0 {
		return d.String()
	}
	out := ""
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if u.name == "d" && d < 48*time.Hour {
			continue // "24h", "36h" read better than "1d", "1d12h"
		}
		if n := d / u.d; n > 0 {
			out += strconv.FormatInt(int64(n), 10) + u.name
			d -= n * u.d
		}
	}
	return out
}
