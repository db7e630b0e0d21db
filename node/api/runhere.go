package api

import (
	"context"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Running a job where it was submitted.
//
// A job submitted and awaited in one call (RunJob) usually takes two
// commits and three hand-offs: its submission (with its placement, when
// a slot is free), the worker hearing of it, its result, and the result
// reaching the watcher. A short job spends nearly all its time in them.
// So when the node that takes the call has a free slot, no job waits in
// the queue, and the job is a short wasm job with no effect outside its
// output, the node runs it at once and proposes the submission, its
// placement here as attempt 1 and the result as one entry (RunHere): one
// commit, no hand-off. Nothing is accepted before that entry commits, so
// a node that dies mid-run loses nothing that was accepted: its caller
// sees the call fail, and a resend (same idempotency key) runs it again.
// What a run may not do for that reason, it is not given: grants
// (secrets, key-value, network), skills, approvals and input stored as a
// blob go the usual way, as does a run that outlasts
// worker.RunHereLimit (stopped, and scheduled). The FSM checks the entry
// as the commands it stands for (consensus applyRunHere).

// RunHerer runs jobs on this node before they are accepted.
type RunHerer interface {
	// Ready reports whether this node may run a job with constraints
	// here now: every member applies RunHere entries, this node is alive
	// and takes new work, and its labels match.
	Ready(constraints map[string]string) bool
	// RunHere runs j at once if a slot is free and its module is compiled
	// here; ok false means nothing is to be recorded from the run.
	RunHere(ctx context.Context, j consensus.Job) (fin *raftpb.FinishJob, ok bool)
	// Recorded hears, for each run RunHere made, its entry and whether it
	// committed with the run (false: dropped, the job queued or a repeat:
	// the run counts for nothing, and the job runs again elsewhere).
	Recorded(run *raftpb.RunHere, ran bool)
}

// runJobKey marks a submission made by RunJob; its value, a *ranHere,
// receives the job when it was run here.
type runJobKey struct{}

// ranHere is the job a RunHere entry recorded, as its commit returned it.
type ranHere struct{ job *consensus.Job }

// runHere runs the job rec describes here, when it qualifies, and returns
// the entry to propose in place of its submission (nil: submit as usual).
func (s *Server) runHere(ctx context.Context, rec *raftpb.JobRecord) *raftpb.Command {
	if s.RunHere == nil || ctx.Value(runJobKey{}) == nil || !runsHere(rec) {
		return nil
	}
	at := s.now().UnixMilli()
	if s.control.State().QueuedReady(rec.Kind, at, queuedReadyLimit) || !s.RunHere.Ready(rec.Constraints) {
		return nil // others wait for a slot: they go first, by the scheduler
	}
	j := consensus.Job{ID: rec.Id, Kind: rec.Kind, ModuleHash: rec.ModuleSha256, Input: rec.Input,
		TimeoutMS: rec.TimeoutMs, MemoryBytes: rec.MemoryBytes, Fuel: rec.Fuel, MaxOutput: rec.MaxOutputBytes,
		Deterministic: rec.Deterministic, Priority: rec.Priority, Attempt: 1, NodeID: s.info.NodeID,
		SubmittedAtMS: rec.SubmittedAtMs}
	fin, ok := s.RunHere.RunHere(ctx, j)
	if !ok {
		return nil
	}
	return &raftpb.Command{Cmd: &raftpb.Command_RunHere{RunHere: &raftpb.RunHere{
		Submit: &raftpb.SubmitJob{Job: rec}, NodeId: s.info.NodeID, PlacedAtMs: at, Finish: fin}}}
}

// queuedReadyLimit bounds the queue walk that looks for a job waiting
// for a slot it could have (State.QueuedReady).
const queuedReadyLimit = 64

// runsHere reports whether a job may be run before it is accepted: one
// the FSM takes a RunHere for (consensus.MayRunBeforeAcceptance), named
// by its module's hash.
func runsHere(rec *raftpb.JobRecord) bool {
	return rec.ModuleSha256 != "" && consensus.MayRunBeforeAcceptance(rec)
}
