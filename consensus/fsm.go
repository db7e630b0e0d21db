package consensus

import (
	"crypto/subtle"
	"fmt"
	"io"
	"sort"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// snapshotVersion is written into every snapshot; Restore refuses newer ones.
const snapshotVersion = 1

// ApplyResult is what FSM.Apply returns for each command: the job after the
// command, or why the command was refused. Refusals are deterministic, so
// every replica refuses the same commands.
type ApplyResult struct {
	Job Job
	Err error
}

// FSM applies committed commands to State. It implements raft.FSM.
type FSM struct {
	state *State
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an FSM over an empty state.
func NewFSM() *FSM { return &FSM{state: newState()} }

// State returns the live state for reads.
func (f *FSM) State() *State { return f.state }

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var cmd raftpb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		// A command that does not decode was written by a newer or broken
		// leader; refusing it deterministically keeps replicas identical.
		f.advance(l.Index)
		return ApplyResult{Err: errf(ErrInvalid, "upgrade this node to the cluster's version", "undecodable raft command at index %d: %v", l.Index, err)}
	}
	s := f.state
	s.mu.Lock()
	res := s.apply(l.Index, &cmd)
	s.applied = l.Index
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return res
}

func (f *FSM) advance(index uint64) {
	s := f.state
	s.mu.Lock()
	s.applied = index
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
		return s.applyAssign(c.AssignJob)
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
			if r := s.applyAssign(a); r.Err == nil {
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
	case *raftpb.Command_SetPolicy:
		return s.applySetPolicy(c.SetPolicy)
	case *raftpb.Command_ExpireJob:
		return s.applyExpire(c.ExpireJob)
	case *raftpb.Command_SetPendingReason:
		return s.applyPendingReason(c.SetPendingReason)
	case *raftpb.Command_SetNodeSchedulable:
		return s.applyNodeSchedulable(c.SetNodeSchedulable)
	default:
		return ApplyResult{Err: errf(ErrInvalid, "upgrade this node to the cluster's version", "unknown raft command %T at index %d", cmd.Cmd, index)}
	}
}

func (s *State) applySubmit(index uint64, c *raftpb.SubmitJob) ApplyResult {
	if c.GetJob() == nil || c.Job.Id == "" {
		return ApplyResult{Err: errf(ErrInvalid, "", "submit without a job id")}
	}
	if prev, ok := s.jobs[c.Job.Id]; ok {
		// Ids are random per submission, so the same id with the same
		// content is the same submission retried (e.g. after a lost reply
		// or a leader change): answer with the job, do not fail.
		if prev.Submitter == c.Job.Submitter && prev.SubmittedAtMS == c.Job.SubmittedAtMs &&
			prev.ModuleHash == c.Job.ModuleSha256 && string(prev.Input) == string(c.Job.Input) {
			return ApplyResult{Job: prev.clone()}
		}
		return ApplyResult{Err: errf(ErrConflict, "retry the submission; a new id is chosen each time", "job %s already exists", c.Job.Id)}
	}
	if key := c.Job.IdempotencyKey; key != "" {
		if id, ok := s.idempotency[key]; ok {
			prev := s.jobs[id]
			if subtle.ConstantTimeCompare(prev.PayloadHash, c.Job.PayloadHash) == 1 {
				return ApplyResult{Job: prev.clone()} // replay: the original job
			}
			return ApplyResult{Job: prev.clone(), Err: errf(ErrConflict, "use a new idempotency key for a different job",
				"idempotency key %q was used for job %s with a different payload", key, id)}
		}
	}
	j := jobFromRecord(c.Job)
	j.Phase = PhaseQueued
	j.Attempt = 0
	j.NodeID = ""
	j.CommitIndex = index
	j.RetriesUsed, j.NotBeforeMS, j.PendingReason = 0, 0, ""
	s.jobs[j.ID] = &j
	s.order = append(s.order, j.ID)
	if j.IdempotencyKey != "" {
		s.idempotency[j.IdempotencyKey] = j.ID
	}
	return ApplyResult{Job: j.clone()}
}

func (s *State) lookup(id string) (*Job, error) {
	j, ok := s.jobs[id]
	if !ok {
		return nil, errf(ErrNotFound, "list jobs with 'palyra job list'", "no job with id %q", id)
	}
	return j, nil
}

func (s *State) applyAssign(c *raftpb.AssignJob) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase != PhaseQueued {
		return ApplyResult{Job: j.clone(), Err: errf(ErrConflict, "", "job %s is %s, not queued", j.ID, j.Phase)}
	}
	if c.Attempt != j.Attempt+1 {
		return ApplyResult{Job: j.clone(), Err: errf(ErrStaleAttempt, "", "job %s: placement attempt %d, expected %d", j.ID, c.Attempt, j.Attempt+1)}
	}
	j.Phase = PhaseRunning
	j.Attempt = c.Attempt
	j.NodeID = c.NodeId
	j.StartedAtMS = c.AtMs
	j.PendingReason = ""
	return ApplyResult{Job: j.clone()}
}

func (s *State) applyFinish(c *raftpb.FinishJob) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase != PhaseRunning || c.Attempt != j.Attempt || c.NodeId != j.NodeID {
		s.staleResults++
		return ApplyResult{Job: j.clone(), Err: errf(ErrStaleAttempt, "",
			"result of job %s attempt %d from %s refused: job is %s at attempt %d on %q",
			j.ID, c.Attempt, c.NodeId, j.Phase, j.Attempt, j.NodeID)}
	}
	j.Stdout, j.Stderr, j.ExitCode, j.FuelUsed = c.Stdout, c.Stderr, c.ExitCode, c.FuelUsed
	j.Artifacts = artifactsFromPB(c.Artifacts)
	j.FinishedAtMS = c.AtMs
	if c.Ok {
		j.Phase = PhaseCompleted
		j.Error = nil
	} else if c.Retryable && j.RetriesUsed < j.MaxRetries {
		// Another attempt after an exponential backoff; the failure is
		// kept as the job's last error until then.
		j.RetriesUsed++
		j.Phase = PhaseQueued
		j.NotBeforeMS = c.AtMs + retryBackoffMS(j.RetriesUsed)
		j.FinishedAtMS = 0
		j.Error = jobErrorFromPB(c.Error)
	} else {
		j.Phase = PhaseFailed
		j.Error = jobErrorFromPB(c.Error)
		if j.Error == nil {
			j.Error = &JobError{Code: "failed", Message: "job failed"}
		}
	}
	return ApplyResult{Job: j.clone()}
}

// retryBackoffMS is the wait before retry n (1-based): 1s, 2s, 4s … 1m.
func retryBackoffMS(n uint32) int64 {
	if n > 6 {
		return 60_000
	}
	return min(int64(1000)<<(n-1), 60_000)
}

func (s *State) applyExpire(c *raftpb.ExpireJob) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase.Terminal() {
		return ApplyResult{Job: j.clone(), Err: errf(ErrConflict, "", "job %s is already %s", j.ID, j.Phase)}
	}
	if j.DeadlineAtMS == 0 || c.AtMs < j.DeadlineAtMS {
		return ApplyResult{Job: j.clone(), Err: errf(ErrConflict, "", "job %s has not reached its deadline", j.ID)}
	}
	j.Phase = PhaseExpired
	j.FinishedAtMS = c.AtMs
	j.Error = &JobError{Code: "expired", Message: fmt.Sprintf("deadline passed before the job completed (attempt %d)", j.Attempt),
		Hint: "give it more time with --deadline, or more capacity"}
	return ApplyResult{Job: j.clone()}
}

func (s *State) applyPendingReason(c *raftpb.SetPendingReason) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase == PhaseQueued {
		j.PendingReason = c.Reason
	}
	return ApplyResult{Job: j.clone()}
}

func (s *State) applyCancel(c *raftpb.CancelJob) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase.Terminal() {
		return ApplyResult{Job: j.clone(), Err: errf(ErrConflict, "", "job %s is already %s", j.ID, j.Phase)}
	}
	j.Phase = PhaseAborted
	j.FinishedAtMS = c.AtMs
	msg := "cancelled"
	if c.Reason != "" {
		msg = c.Reason
	}
	j.Error = &JobError{Code: "aborted", Message: msg}
	return ApplyResult{Job: j.clone()}
}

func (s *State) applyRequeue(c *raftpb.RequeueJob) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase != PhaseRunning || j.Attempt != c.Attempt {
		return ApplyResult{Job: j.clone(), Err: errf(ErrStaleAttempt, "", "job %s attempt %d is not running (job is %s at attempt %d)", j.ID, c.Attempt, j.Phase, j.Attempt)}
	}
	j.Phase = PhaseQueued
	return ApplyResult{Job: j.clone()}
}

// Snapshot implements raft.FSM. The copy is taken under the read lock;
// encoding happens later in Persist, off the apply path.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	s := f.state
	s.mu.RLock()
	defer s.mu.RUnlock()
	snap := &raftpb.Snapshot{Version: snapshotVersion, StaleResults: s.staleResults}
	snap.Jobs = make([]*raftpb.JobRecord, 0, len(s.order))
	for _, id := range s.order {
		snap.Jobs = append(snap.Jobs, jobToRecord(s.jobs[id]))
	}
	s.snapshotIdentity(snap)
	s.snapshotData(snap)
	return &fsmSnapshot{snap: snap}, nil
}

// Restore implements raft.FSM: it replaces the whole state.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	var snap raftpb.Snapshot
	if err := proto.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	if snap.Version > snapshotVersion {
		return fmt.Errorf("snapshot version %d is newer than this node understands (%d): upgrade the node", snap.Version, snapshotVersion)
	}
	ns := newState()
	for _, r := range snap.Jobs {
		j := jobFromRecord(r)
		ns.jobs[j.ID] = &j
		ns.order = append(ns.order, j.ID)
		if j.IdempotencyKey != "" {
			ns.idempotency[j.IdempotencyKey] = j.ID
		}
	}
	sort.SliceStable(ns.order, func(a, b int) bool {
		return ns.jobs[ns.order[a]].CommitIndex < ns.jobs[ns.order[b]].CommitIndex
	})
	ns.staleResults = snap.StaleResults
	ns.restoreIdentity(&snap)
	ns.restoreData(&snap)

	s := f.state
	s.mu.Lock()
	s.jobs, s.order, s.staleResults, s.id, s.idempotency, s.data = ns.jobs, ns.order, ns.staleResults, ns.id, ns.idempotency, ns.data
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return nil
}

type fsmSnapshot struct{ snap *raftpb.Snapshot }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(s.snap)
	if err == nil {
		_, err = sink.Write(data)
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
