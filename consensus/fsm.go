package consensus

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// ApplyResult is what FSM.Apply returns for each command: the job after the
// command, or why the command was refused. Refusals are deterministic, so
// every replica refuses the same commands.
type ApplyResult struct {
	Job Job
	Err error
	// Batch holds, for a batch of results, each one's verdict in order.
	Batch []error
	// Each holds, for a CommandBatch, each command's result in order.
	Each []ApplyResult
}

// FSM applies committed commands to State. It implements raft.FSM.
type FSM struct {
	state *State
	// appliedBytes counts the command bytes applied; atSnapshot is its
	// value when the last snapshot was taken (Store snapshots early when
	// the log since then holds much: a restart replays all of it).
	appliedBytes, atSnapshot atomic.Uint64
	// onUnknown, if set, hears of each applied entry that carries fields
	// this software does not know (unknownIn), with where.
	onUnknown func(index uint64, where string)
}

var _ raft.FSM = (*FSM)(nil)

// sinceSnapshot is how many command bytes were applied since the last
// snapshot (or the start).
func (f *FSM) sinceSnapshot() uint64 { return f.appliedBytes.Load() - f.atSnapshot.Load() }

// NewFSM returns an FSM over an empty state.
func NewFSM() *FSM { return &FSM{state: newState()} }

// State returns the live state for reads.
func (f *FSM) State() *State { return f.state }

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.appliedBytes.Add(uint64(len(l.Data)))
	var cmd raftpb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		// A command that does not decode was written by a newer or broken
		// leader; refusing it deterministically keeps replicas identical.
		f.advance(l.Index)
		return ApplyResult{Err: errf(ErrInvalid, "upgrade this node to the cluster's version", "undecodable raft command at index %d: %v", l.Index, err)}
	}
	if f.onUnknown != nil {
		if m := cmd.ProtoReflect(); hasUnknown(m) {
			f.onUnknown(l.Index, unknownIn(m, "command"))
		}
	}
	s := f.state
	s.mu.Lock()
	s.clockMS = clampTimes(&cmd, s.clockMS)
	res := s.apply(l.Index, &cmd)
	s.auditCommand(&cmd, res)
	if res.Err == nil {
		switch c := cmd.Cmd.(type) {
		case *raftpb.Command_Skill:
			s.skillEventHooks(l.Index, c.Skill)
		case *raftpb.Command_ConsumePairing:
			if m := c.ConsumePairing.Member; m != nil && !c.ConsumePairing.DryRun && m.Kind == "node" && len(s.data.hooks) > 0 {
				s.fireHooks(l.Index, HookNodeJoined, "n-"+m.Id, HookEvent{Event: HookNodeJoined, Subject: m.Id})
			}
		}
	}
	if r := cmd.GetRound(); r != nil {
		// Placements the leader attached to the command: after it, so a
		// submitted job exists and a batch's results have freed their slots.
		s.applyRound(r)
	}
	s.fireEndedHooks(l.Index, cmd.HookRules)
	switch cmd.Cmd.(type) {
	case *raftpb.Command_AddMember, *raftpb.Command_RevokeMember, *raftpb.Command_ConsumePairing, *raftpb.Command_SetNodeSchedulable,
		*raftpb.Command_RevokeCert:
		s.touch(TopicMembers)
	case *raftpb.Command_SetPolicy:
		s.touch(TopicPolicy)
	}
	s.applied = l.Index
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return res
}

// Batchable reports whether cmd may travel in a CommandBatch: submits,
// cancels and results, whose effects stay inside the job tables (no hooks
// of their own, no membership or policy topics) and whose order within
// one entry is the order they were batched in.
func Batchable(cmd *raftpb.Command) bool {
	if cmd == nil || cmd.Round != nil {
		return false
	}
	switch cmd.Cmd.(type) {
	case *raftpb.Command_SubmitJob, *raftpb.Command_CancelJob, *raftpb.Command_FinishBatch, *raftpb.Command_FinishJob, *raftpb.Command_RunHere:
		return true
	}
	return false
}

// applyBatch applies each command of a batch in order at index, as if
// each had its own entry there; one that may not be batched is refused on
// its own (a leader never builds such a batch; refusing keeps replicas
// identical whatever the log holds).
func (s *State) applyBatch(index uint64, b *raftpb.CommandBatch) ApplyResult {
	out := ApplyResult{Each: make([]ApplyResult, len(b.GetCommands()))}
	for i, sub := range b.GetCommands() {
		if !Batchable(sub) {
			out.Each[i] = ApplyResult{Err: errf(ErrInvalid, "", "command %d of the batch at index %d (%T) may not be batched", i, index, sub.GetCmd())}
			continue
		}
		out.Each[i] = s.apply(index, sub)
		s.auditCommand(sub, out.Each[i])
	}
	return out
}

// StoreConfiguration is raft's ConfigurationStore hook, called with each
// committed configuration entry (a join, a removal, a promotion). The
// state has nothing to change for it, but implementing it makes raft count
// the entry as applied: without it raft's applied index stayed at the
// command before, and a snapshot taken right after a membership change on
// an idle cluster was refused ("wait until the configuration entry at N
// has been applied") until the next command came along.
func (f *FSM) StoreConfiguration(index uint64, _ raft.Configuration) {
	f.advance(index)
}

var _ raft.ConfigurationStore = (*FSM)(nil)

// advance moves the applied index to index (never back) and wakes the
// waiters on it.
func (f *FSM) advance(index uint64) {
	s := f.state
	s.mu.Lock()
	s.applied = max(s.applied, index)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// apply mutates the state; the caller holds s.mu.
func (s *State) apply(index uint64, cmd *raftpb.Command) ApplyResult {
	switch c := cmd.Cmd.(type) {
	case *raftpb.Command_SubmitJob:
		return s.applySubmit(index, c.SubmitJob)
	case *raftpb.Command_AssignJob:
		return s.applyAssign(c.AssignJob, 0) // an earlier version's command
	case *raftpb.Command_SetSecret:
		return s.applySetSecret(c.SetSecret)
	case *raftpb.Command_DeleteSecret:
		return s.applyDeleteSecret(c.DeleteSecret)
	case *raftpb.Command_KvPut:
		return s.applyKVPut(c.KvPut)
	case *raftpb.Command_KvDelete:
		return s.applyKVDelete(c.KvDelete)
	case *raftpb.Command_AssignBatch:
		placed := 0
		for _, a := range c.AssignBatch.Assignments {
			if r := s.applyAssign(a, 0); r.Err == nil {
				placed++
			}
		}
		if placed == 0 && len(c.AssignBatch.Assignments) > 0 {
			return ApplyResult{Err: errf(ErrConflict, "", "no placement in the batch was current")}
		}
		return ApplyResult{}
	case *raftpb.Command_FinishJob:
		return s.applyFinish(c.FinishJob)
	case *raftpb.Command_CancelJob:
		return s.applyCancel(c.CancelJob)
	case *raftpb.Command_RequeueJob:
		return s.applyRequeue(c.RequeueJob)
	case *raftpb.Command_CreatePairing:
		return s.applyCreatePairing(c.CreatePairing)
	case *raftpb.Command_ConsumePairing:
		return s.applyConsumePairing(c.ConsumePairing)
	case *raftpb.Command_RevokePairing:
		return s.applyRevokePairing(c.RevokePairing)
	case *raftpb.Command_AddMember:
		return s.applyAddMember(c.AddMember)
	case *raftpb.Command_RevokeMember:
		return s.applyRevokeMember(c.RevokeMember)
	case *raftpb.Command_UseToken:
		return s.applyUseToken(c.UseToken)
	case *raftpb.Command_RevokeCert:
		return s.applyRevokeCert(c.RevokeCert)
	case *raftpb.Command_RecordCerts:
		return s.applyRecordCerts(c.RecordCerts)
	case *raftpb.Command_StartCertLedger:
		return s.applyStartCertLedger(c.StartCertLedger)
	case *raftpb.Command_SetPolicy:
		return s.applySetPolicy(c.SetPolicy)
	case *raftpb.Command_ExpireJob:
		return s.applyExpire(c.ExpireJob)
	case *raftpb.Command_SetPendingReason:
		return s.applyPendingReason(c.SetPendingReason)
	case *raftpb.Command_SetNodeSchedulable:
		return s.applyNodeSchedulable(c.SetNodeSchedulable)
	case *raftpb.Command_SchedulerRound:
		return s.applyRound(c.SchedulerRound)
	case *raftpb.Command_FinishBatch:
		out := ApplyResult{Batch: make([]error, len(c.FinishBatch.Results))}
		for i, r := range c.FinishBatch.Results {
			out.Batch[i] = s.applyFinish(r).Err
		}
		return out
	case *raftpb.Command_SubmitArray:
		return s.applySubmitArray(index, c.SubmitArray)
	case *raftpb.Command_PruneJobs:
		return s.applyPrune(c.PruneJobs)
	case *raftpb.Command_SetRetention:
		return s.applySetRetention(c.SetRetention)
	case *raftpb.Command_Skill:
		return s.applySkill(c.Skill)
	case *raftpb.Command_DecideJob:
		return s.applyDecide(c.DecideJob)
	case *raftpb.Command_Hook:
		return s.applyHook(c.Hook)
	case *raftpb.Command_CaTrust:
		return s.applyCATrust(c.CaTrust)
	case *raftpb.Command_Batch:
		return s.applyBatch(index, c.Batch)
	case *raftpb.Command_RunHere:
		return s.applyRunHere(index, c.RunHere)
	default:
		return ApplyResult{Err: errf(ErrInvalid, "upgrade this node to the cluster's version", "unknown raft command %T at index %d", cmd.Cmd, index)}
	}
}
