package consensus

import (
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// One clock for the times the FSM compares.
//
// Commands carry times: when a job was submitted and its deadline, when a
// pairing code expires, when a token was used (used tokens are pruned by
// age), when a result arrived (retry backoff counts from it). They used to
// be read from whichever node proposed them, so a job's deadline came from
// the API node's clock but expired by the leader's, and a proposer whose
// clock ran ahead could prune every used CA token, making them usable
// again. Now:
//
//  1. The leader takes every command's time, at proposal (Store.Apply):
//     the time the proposer wrote is replaced by the leader's clock, and
//     absolute times measured from it (a deadline, an expiry, a drain
//     deadline, a prune horizon) move by the same amount, so the duration
//     the caller asked for is kept. A job's submission time itself stays
//     the API node's (the FSM recognises a resent submission by it); its
//     deadline and backoff are rebased onto the leader's clock.
//  2. The FSM keeps the latest time it applied (the cluster clock, kept in
//     snapshots) and never lets time go back: a command stamped earlier
//     (a new leader whose clock is behind the last one's) is moved forward
//     to it, tied times with it. Every replica does the same with the same
//     log, so this stays deterministic. (Upgrade every node before relying
//     on it: an older node applies the same log without this step.)
//
// A leader's clock far ahead still moves the cluster clock ahead with it;
// no bound on forward steps is possible, because an idle cluster commits
// nothing for hours and its next command rightly carries a later time.
// Keep the nodes' clocks in sync (NTP); `palyra doctor` checks this node's,
// and a leader whose clock is behind the cluster's says so in its log.

// timeGroup is one time a command was proposed at, and the absolute times
// derived from it that move with it (zero ones mean "none" and stay zero).
// An anchor's own time is the proposer's and is never moved: only its tied
// times are rebased at proposal, and the FSM leaves the group alone.
type timeGroup struct {
	at     *int64
	tied   []*int64
	anchor bool
}

// commandTimes lists the proposal times of cmd.
func commandTimes(cmd *raftpb.Command) []timeGroup {
	one := func(at *int64, tied ...*int64) []timeGroup { return []timeGroup{{at: at, tied: tied}} }
	job := func(r *raftpb.JobRecord) []timeGroup {
		if r == nil {
			return nil
		}
		return []timeGroup{{at: &r.SubmittedAtMs, tied: []*int64{&r.DeadlineAtMs, &r.NotBeforeMs}, anchor: true}}
	}
	switch c := cmd.Cmd.(type) {
	case *raftpb.Command_SubmitJob:
		return job(c.SubmitJob.GetJob())
	case *raftpb.Command_SubmitArray:
		return job(c.SubmitArray.GetTemplate())
	case *raftpb.Command_RunHere:
		// The submission is the proposer's (an anchor, as a submit's); the
		// placement moves with the result, keeping the run's length.
		out := job(c.RunHere.GetSubmit().GetJob())
		if f := c.RunHere.GetFinish(); f != nil {
			out = append(out, timeGroup{at: &f.AtMs, tied: []*int64{&c.RunHere.PlacedAtMs}})
		}
		return out
	case *raftpb.Command_AssignJob:
		return one(&c.AssignJob.AtMs)
	case *raftpb.Command_AssignBatch:
		var out []timeGroup
		for _, a := range c.AssignBatch.Assignments {
			out = append(out, timeGroup{at: &a.AtMs})
		}
		return out
	case *raftpb.Command_SchedulerRound:
		g := timeGroup{at: &c.SchedulerRound.AtMs}
		for _, a := range c.SchedulerRound.Placements {
			g.tied = append(g.tied, &a.AtMs)
		}
		return []timeGroup{g}
	case *raftpb.Command_FinishJob:
		return one(&c.FinishJob.AtMs)
	case *raftpb.Command_FinishBatch:
		var out []timeGroup
		for _, r := range c.FinishBatch.Results {
			out = append(out, timeGroup{at: &r.AtMs})
		}
		return out
	case *raftpb.Command_CancelJob:
		return one(&c.CancelJob.AtMs)
	case *raftpb.Command_ExpireJob:
		return one(&c.ExpireJob.AtMs)
	case *raftpb.Command_SetNodeSchedulable:
		return one(&c.SetNodeSchedulable.AtMs, &c.SetNodeSchedulable.DrainDeadlineMs)
	case *raftpb.Command_PruneJobs:
		return one(&c.PruneJobs.AtMs, &c.PruneJobs.BeforeMs)
	case *raftpb.Command_SetRetention:
		return one(&c.SetRetention.AtMs)
	case *raftpb.Command_Skill:
		return one(&c.Skill.AtMs)
	case *raftpb.Command_DecideJob:
		return one(&c.DecideJob.AtMs)
	case *raftpb.Command_DeleteSecret:
		return one(&c.DeleteSecret.AtMs)
	case *raftpb.Command_Hook:
		return one(&c.Hook.AtMs)
	case *raftpb.Command_CreatePairing:
		if p := c.CreatePairing.GetPairing(); p != nil {
			return one(&p.CreatedAtMs, &p.ExpiresAtMs)
		}
	case *raftpb.Command_ConsumePairing:
		return one(&c.ConsumePairing.AtMs)
	case *raftpb.Command_RevokePairing:
		return one(&c.RevokePairing.AtMs)
	case *raftpb.Command_AddMember:
		if m := c.AddMember.GetMember(); m != nil {
			return one(&m.AddedAtMs)
		}
	case *raftpb.Command_RevokeMember:
		return one(&c.RevokeMember.AtMs)
	case *raftpb.Command_UseToken:
		return one(&c.UseToken.AtMs)
	case *raftpb.Command_RevokeCert:
		return one(&c.RevokeCert.AtMs)
	case *raftpb.Command_RecordCerts:
		return one(&c.RecordCerts.AtMs)
	case *raftpb.Command_StartCertLedger:
		return one(&c.StartCertLedger.AtMs)
	case *raftpb.Command_SetPolicy:
		return one(&c.SetPolicy.AtMs)
	case *raftpb.Command_SetSecret:
		return one(&c.SetSecret.AtMs)
	case *raftpb.Command_KvPut: // an operator's (palyra kv) is journaled; a job's has no time
		if c.KvPut.By != "" {
			return one(&c.KvPut.AtMs)
		}
	case *raftpb.Command_KvDelete:
		if c.KvDelete.By != "" {
			return one(&c.KvDelete.AtMs)
		}
	case *raftpb.Command_Batch:
		var out []timeGroup
		for _, sub := range c.Batch.GetCommands() {
			if _, nested := sub.GetCmd().(*raftpb.Command_Batch); !nested {
				out = append(out, commandTimes(sub)...)
			}
		}
		return out
	}
	return nil // no time (requeue, pending reason, a job's key-value write)
}

// move sets g's time to t and moves its tied times by as much; an
// anchor keeps its time.
func (g timeGroup) move(t int64) {
	if *g.at != 0 {
		d := t - *g.at
		for _, p := range g.tied {
			if *p != 0 {
				*p += d
			}
		}
	}
	if !g.anchor {
		*g.at = t
	}
}

// stampLeaderTime returns cmd with every proposal time set to the
// leader's clock nowMS (step 1 above). cmd itself is left as it was, so a
// command sent again is stamped afresh from the proposer's times; only a
// job array's tasks are shared with it, not copied.
func stampLeaderTime(cmd *raftpb.Command, nowMS int64) *raftpb.Command {
	var out *raftpb.Command
	if a, ok := cmd.Cmd.(*raftpb.Command_SubmitArray); ok {
		out = &raftpb.Command{Cmd: &raftpb.Command_SubmitArray{SubmitArray: &raftpb.SubmitArray{
			Template: proto.Clone(a.SubmitArray.GetTemplate()).(*raftpb.JobRecord), Tasks: a.SubmitArray.Tasks}}}
	} else {
		out = proto.Clone(cmd).(*raftpb.Command)
	}
	for _, g := range commandTimes(out) {
		g.move(nowMS)
	}
	return out
}

// clampTimes moves every proposal time of cmd that is earlier than the
// cluster clock up to it (step 2 above), in place, and returns the clock
// after cmd.
func clampTimes(cmd *raftpb.Command, clockMS int64) int64 {
	for _, g := range commandTimes(cmd) {
		if g.anchor {
			continue
		}
		if *g.at < clockMS {
			g.move(clockMS)
		}
		clockMS = max(clockMS, *g.at)
	}
	return clockMS
}

// ClockMS is the cluster clock: the latest proposal time applied (Unix
// milliseconds; 0 before any).
func (s *State) ClockMS() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.clockMS
}
