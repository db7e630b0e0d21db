package consensus

import (
	"crypto/subtle"
	"fmt"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// DefaultRetentionMS is how long terminal jobs are kept unless an operator
// sets another retention: a day.
const DefaultRetentionMS = 24 * 60 * 60 * 1000

// PrefetchSuffix marks, in a round's NodeSlots, the capacity array tasks
// may use on a node: its slots plus the tasks it may hold waiting for one.
const PrefetchSuffix = "/prefetch"

// MaxArrayTasks bounds one job array.
const MaxArrayTasks = 1_000_000

// Every job change below copies the job, edits the copy and hands both to
// put, which keeps the indexes: stored jobs are never mutated in place.

func (s *State) applySubmit(index uint64, c *raftpb.SubmitJob) ApplyResult {
	j, res, fresh := s.submitted(index, c)
	if !fresh {
		return res
	}
	s.accept(&j)
	return ApplyResult{Job: j}
}

// accept stores a job submitted and checked (submitted) in the state.
func (s *State) accept(j *Job) {
	s.put(nil, j)
	if j.IdempotencyKey != "" {
		s.idempotency[j.IdempotencyKey] = j.ID
	}
}

// submitted checks a submission and returns the job it makes (fresh), or
// what to answer instead: a refusal, or the job a repeated submission or
// a reused idempotency key already made. It changes nothing.
func (s *State) submitted(index uint64, c *raftpb.SubmitJob) (j Job, res ApplyResult, fresh bool) {
	if c.GetJob() == nil || c.Job.Id == "" {
		return j, ApplyResult{Err: errf(ErrInvalid, "", "submit without a job id")}, false
	}
	if prev, ok := s.jobs[c.Job.Id]; ok {
		// Ids are random per submission, so the same id with the same
		// content is the same submission retried (e.g. after a lost reply
		// or a leader change): answer with the job, do not fail.
		if prev.Submitter == c.Job.Submitter && prev.SubmittedAtMS == c.Job.SubmittedAtMs &&
			prev.ModuleHash == c.Job.ModuleSha256 && string(prev.Input) == string(c.Job.Input) && prev.InputHash == c.Job.InputSha256 {
			return j, ApplyResult{Job: *prev}, false
		}
		return j, ApplyResult{Err: errf(ErrConflict, "retry the submission; a new id is chosen each time", "job %s already exists", c.Job.Id)}, false
	}
	if _, ok := s.arrays[c.Job.Id]; ok {
		return j, ApplyResult{Err: errf(ErrConflict, "retry the submission; a new id is chosen each time", "array %s already exists", c.Job.Id)}, false
	}
	if key := c.Job.IdempotencyKey; key != "" {
		if id, ok := s.idempotency[key]; ok {
			if a, ok := s.arrays[id]; ok {
				return j, ApplyResult{Job: a.Template, Err: errf(ErrConflict, "use a new idempotency key for a different job",
					"idempotency key %q was used for job array %s", key, id)}, false
			}
			if prev, ok := s.jobs[id]; ok {
				if subtle.ConstantTimeCompare(prev.PayloadHash, c.Job.PayloadHash) == 1 {
					return j, ApplyResult{Job: *prev}, false // replay: the original job
				}
				return j, ApplyResult{Job: *prev, Err: errf(ErrConflict, "use a new idempotency key for a different job",
					"idempotency key %q was used for job %s with a different payload", key, id)}, false
			}
		}
	}
	j = jobFromRecord(c.Job)
	j.Phase = PhaseQueued
	if j.RequiresApproval {
		// It waits for a person; DeadlineAtMS is when the wait expires.
		if j.DeadlineAtMS == 0 {
			return Job{}, ApplyResult{Err: errf(ErrInvalid, "", "job %s requires approval but has no approval expiry", j.ID)}, false
		}
		j.Phase = PhaseWaitingForApproval
		j.DecidedBy, j.DecidedAtMS, j.DecisionReason = "", 0, ""
	}
	j.Attempt = 0
	j.NodeID = ""
	j.CommitIndex = index
	j.ArrayID, j.ArrayIndex = "", 0
	j.RetriesUsed, j.NotBeforeMS, j.PendingReason, j.Earlier = 0, 0, "", nil
	return j, ApplyResult{}, true
}

// applySubmitArray accepts a job array: the array record and one queued
// job per task, all in this one entry.
func (s *State) applySubmitArray(index uint64, c *raftpb.SubmitArray) ApplyResult {
	t := c.GetTemplate()
	switch {
	case t == nil || t.Id == "":
		return ApplyResult{Err: errf(ErrInvalid, "", "array without an id")}
	case len(c.Tasks) == 0:
		return ApplyResult{Err: errf(ErrInvalid, "give at least one input", "array %s has no tasks", t.Id)}
	case len(c.Tasks) > MaxArrayTasks:
		return ApplyResult{Err: errf(ErrInvalid, "split the work into several arrays", "array of %d tasks; the limit is %d", len(c.Tasks), MaxArrayTasks)}
	}
	if a, ok := s.arrays[t.Id]; ok {
		prev := a.Template
		if prev.Submitter == t.Submitter && prev.SubmittedAtMS == t.SubmittedAtMs && prev.ModuleHash == t.ModuleSha256 && a.Size == uint32(len(c.Tasks)) {
			return ApplyResult{Job: prev} // the same submission, retried
		}
		return ApplyResult{Err: errf(ErrConflict, "retry the submission; a new id is chosen each time", "array %s already exists", t.Id)}
	}
	if _, ok := s.jobs[t.Id]; ok {
		return ApplyResult{Err: errf(ErrConflict, "retry the submission; a new id is chosen each time", "job %s already exists", t.Id)}
	}
	if key := t.IdempotencyKey; key != "" {
		if id, ok := s.idempotency[key]; ok {
			if a, ok := s.arrays[id]; ok && subtle.ConstantTimeCompare(a.Template.PayloadHash, t.PayloadHash) == 1 {
				return ApplyResult{Job: a.Template}
			}
			return ApplyResult{Err: errf(ErrConflict, "use a new idempotency key for a different job",
				"idempotency key %q was used for %s with a different payload", key, id)}
		}
	}
	tmpl := jobFromRecord(t)
	tmpl.Phase, tmpl.Attempt, tmpl.NodeID, tmpl.CommitIndex = PhaseQueued, 0, "", index
	tmpl.Input, tmpl.InputHash, tmpl.InputSize = nil, "", 0
	tmpl.RetriesUsed, tmpl.NotBeforeMS, tmpl.PendingReason, tmpl.Earlier = 0, 0, "", nil
	tmpl.ArrayID, tmpl.ArrayIndex = "", 0
	a := &Array{Template: tmpl, Size: uint32(len(c.Tasks))}
	s.arrays[tmpl.ID] = a
	s.idx.arrays.ReplaceOrInsert(a)
	if tmpl.ModuleHash != "" {
		s.idx.blobRefs[tmpl.ModuleHash]++ // the array's own reference, dropped when it is pruned
	}
	for i, task := range c.Tasks {
		j := tmpl
		j.ID = TaskID(tmpl.ID, uint32(i))
		j.ArrayID, j.ArrayIndex = tmpl.ID, uint32(i)
		j.Input, j.InputHash, j.InputSize = task.Input, task.InputSha256, task.InputSize
		j.IdempotencyKey, j.PayloadHash = "", nil
		s.put(nil, &j)
	}
	if tmpl.IdempotencyKey != "" {
		s.idempotency[tmpl.IdempotencyKey] = tmpl.ID
	}
	s.touch(TopicJob(tmpl.ID))
	return ApplyResult{Job: tmpl}
}

func (s *State) lookup(id string) (*Job, error) {
	j, ok := s.jobs[id]
	if !ok {
		return nil, errf(ErrNotFound, "list jobs with 'palyra job list'", "no job with id %q", id)
	}
	return j, nil
}

func (s *State) applyAssign(c *raftpb.AssignJob, rules uint32) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase != PhaseQueued {
		return ApplyResult{Job: *j, Err: errf(ErrConflict, "", "job %s is %s, not queued", j.ID, j.Phase)}
	}
	if c.Attempt != j.Attempt+1 {
		return ApplyResult{Job: *j, Err: errf(ErrStaleAttempt, "", "job %s: placement attempt %d, expected %d", j.ID, c.Attempt, j.Attempt+1)}
	}
	if j.SkillID != "" && rules >= SkillRules {
		// A run of a skill disabled, quarantined or removed since it was
		// queued ends here instead of starting.
		if why := s.skillUnavailable(j.SkillID); why != "" {
			s.endSkillRun(j, why, "", c.AtMs)
			return ApplyResult{Job: *s.jobs[j.ID], Err: errf(ErrConflict, "", "job %s: skill %s is %s", j.ID, j.SkillID, why)}
		}
	}
	n := placed(*j, c)
	s.put(j, &n)
	return ApplyResult{Job: n}
}

// placed is queued job j placed by c (checked by the caller).
func placed(j Job, c *raftpb.AssignJob) Job {
	j.Phase = PhaseRunning
	j.Attempt = c.Attempt
	j.NodeID = c.NodeId
	j.StartedAtMS, j.PlacedAtMS = c.AtMs, c.AtMs
	j.PendingReason = ""
	return j
}

// applyRound applies one scheduling round. Each placement is checked again
// here, against the state as it is when the round commits: the node must
// still be a schedulable member and have a free slot by the capacity the
// planner saw; a placement that fails a check is dropped (the job stays
// queued for the next round), the rest apply.
func (s *State) applyRound(c *raftpb.SchedulerRound) ApplyResult {
	for _, id := range c.Expire {
		s.applyExpire(&raftpb.ExpireJob{Id: id, AtMs: c.AtMs})
	}
	for _, r := range c.Requeues {
		s.requeue(r, c.AtMs)
	}
	slots := map[[2]string]uint32{}
	for _, ns := range c.Slots {
		slots[[2]string{ns.NodeId, ns.Kind}] = ns.Slots
	}
	used := map[[2]string]uint32{} // (node, kind) → running there, plus placed by this round
	for _, p := range c.Placements {
		j, ok := s.jobs[p.Id]
		if !ok || j.Phase != PhaseQueued {
			continue
		}
		m, ok := s.id.members["node:"+p.NodeId]
		if !ok || m.Revoked || m.Ineligible || m.Draining {
			continue
		}
		k := [2]string{p.NodeId, j.Kind}
		if _, seen := used[k]; !seen {
			used[k] = 0
			for _, r := range s.idx.running[p.NodeId] {
				if r.Kind == j.Kind {
					used[k]++
				}
			}
		}
		limit := slots[k]
		if j.ArrayID != "" {
			if l, ok := slots[[2]string{p.NodeId, j.Kind + PrefetchSuffix}]; ok {
				limit = l
			}
		}
		if used[k] >= limit {
			continue
		}
		if s.applyAssign(&raftpb.AssignJob{Id: p.Id, Attempt: p.Attempt, NodeId: p.NodeId, AtMs: c.AtMs}, c.Rules).Err == nil {
			used[k]++
		}
	}
	for _, r := range c.Pending {
		s.applyPendingReason(r)
	}
	return ApplyResult{}
}

func (s *State) applyFinish(c *raftpb.FinishJob) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if c.EndedOutput {
		return s.applyEndedOutput(j, c)
	}
	if j.Phase != PhaseRunning || c.Attempt != j.Attempt || c.NodeId != j.NodeID {
		s.staleResults++
		return ApplyResult{Job: *j, Err: errf(ErrStaleAttempt, "",
			"result of job %s attempt %d from %s refused: job is %s at attempt %d on %q",
			j.ID, c.Attempt, c.NodeId, j.Phase, j.Attempt, j.NodeID)}
	}
	n := finished(*j, c)
	s.put(j, &n)
	return ApplyResult{Job: n}
}

// finished is running job j ended by result c (checked by the caller):
// completed, failed, or queued again for a retry.
func finished(n Job, c *raftpb.FinishJob) Job {
	n.Stdout, n.Stderr, n.ExitCode, n.FuelUsed = c.Stdout, c.Stderr, c.ExitCode, c.FuelUsed
	n.StdoutHash, n.StdoutSize, n.StderrHash, n.StderrSize = c.StdoutSha256, c.StdoutSize, c.StderrSha256, c.StderrSize
	if n.StdoutHash == "" {
		n.StdoutSize = uint64(len(c.Stdout))
	}
	if n.StderrHash == "" {
		n.StderrSize = uint64(len(c.Stderr))
	}
	n.Artifacts = artifactsFromPB(c.Artifacts)
	n.FinishedAtMS = c.AtMs
	n.StartedAtMS = runStart(n, c)
	if c.Ok {
		n.Phase = PhaseCompleted
		n.Error = nil
	} else if c.Retryable && n.RetriesUsed < n.MaxRetries {
		// Another attempt after an exponential backoff; the failure is
		// kept as the job's last error until then.
		code, msg := "failed", "the run failed"
		if c.Error != nil {
			code, msg = c.Error.Code, c.Error.Message
		}
		n.endAttempt(code, msg, c.AtMs)
		n.RetriesUsed++
		n.Phase = PhaseQueued
		n.NotBeforeMS = c.AtMs + retryBackoffMS(n.RetriesUsed)
		n.FinishedAtMS = 0
		n.Error = jobErrorFromPB(c.Error)
	} else {
		n.Phase = PhaseFailed
		n.Error = jobErrorFromPB(c.Error)
		if n.Error == nil {
			n.Error = &JobError{Code: "failed", Message: "job failed"}
		}
	}
	return n
}

// applyEndedOutput keeps the output a run had written when its job was
// cancelled or expired under it (FinishJob.ended_output): the job keeps
// its phase, error and times; only its stdout, stderr and fuel are set
// (an earlier attempt's, kept while it was retried, give way), and only
// from the attempt and node the job ended on. Sent again after an unknown
// outcome, it sets the same again.
func (s *State) applyEndedOutput(j *Job, c *raftpb.FinishJob) ApplyResult {
	if (j.Phase != PhaseAborted && j.Phase != PhaseExpired) || c.Attempt != j.Attempt || c.NodeId != j.NodeID || j.Attempt == 0 {
		return ApplyResult{Job: *j, Err: errf(ErrStaleAttempt, "",
			"output of job %s attempt %d from %s not kept: job is %s at attempt %d on %q", j.ID, c.Attempt, c.NodeId, j.Phase, j.Attempt, j.NodeID)}
	}
	n := *j
	n.Stdout, n.Stderr, n.FuelUsed = c.Stdout, c.Stderr, c.FuelUsed
	n.StdoutHash, n.StdoutSize, n.StderrHash, n.StderrSize = c.StdoutSha256, c.StdoutSize, c.StderrSha256, c.StderrSize
	if n.StdoutHash == "" {
		n.StdoutSize = uint64(len(c.Stdout))
	}
	if n.StderrHash == "" {
		n.StderrSize = uint64(len(c.Stderr))
	}
	s.put(j, &n)
	return ApplyResult{Job: n}
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
		return ApplyResult{Job: *j, Err: errf(ErrConflict, "", "job %s is already %s", j.ID, j.Phase)}
	}
	if j.DeadlineAtMS == 0 || c.AtMs < j.DeadlineAtMS {
		return ApplyResult{Job: *j, Err: errf(ErrConflict, "", "job %s has not reached its deadline", j.ID)}
	}
	n := *j
	n.Phase = PhaseExpired
	n.FinishedAtMS = c.AtMs
	n.Error = &JobError{Code: "expired", Message: fmt.Sprintf("deadline passed before the job completed (attempt %d)", j.Attempt),
		Hint: "give it more time with --deadline, or more capacity"}
	if j.Phase == PhaseWaitingForApproval {
		n.Error = &JobError{Code: "expired", Message: "nobody approved or denied the job before its approval expired",
			Hint: "run it again, and approve it with 'palyra job approve ID' in time"}
	}
	s.put(j, &n)
	return ApplyResult{Job: n}
}

// applyDecide records a person's decision on a job waiting for approval:
// approved, it is queued (with its own deadline); denied, it ends aborted
// with the reason.
func (s *State) applyDecide(c *raftpb.DecideJob) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase != PhaseWaitingForApproval {
		return ApplyResult{Job: *j, Err: errf(ErrConflict, "only a job in waiting_for_approval can be approved or denied",
			"job %s is %s", j.ID, j.Phase)}
	}
	if c.Approve && j.SkillID != "" && c.Rules >= SkillRules {
		if why := s.skillUnavailable(j.SkillID); why != "" {
			return ApplyResult{Job: *j, Err: errf(ErrConflict,
				"an operator enables it first ('palyra skill enable "+j.SkillID+"'), or deny the run ('palyra job deny "+j.ID+" --reason …')",
				"skill %s is %s: its runs do not start, so job %s cannot be approved", j.SkillID, why, j.ID)}
		}
	}
	n := *j
	n.DecidedBy, n.DecidedAtMS, n.DecisionReason = c.By, c.AtMs, c.Reason
	if c.Approve {
		n.Phase = PhaseQueued
		n.DeadlineAtMS = n.RunDeadlineAtMS
	} else {
		n.Phase = PhaseAborted
		n.FinishedAtMS = c.AtMs
		msg := "denied by " + c.By
		if c.Reason != "" {
			msg += ": " + c.Reason
		}
		n.Error = &JobError{Code: "denied", Message: msg}
	}
	s.put(j, &n)
	return ApplyResult{Job: n}
}

func (s *State) applyPendingReason(c *raftpb.SetPendingReason) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase == PhaseQueued && j.PendingReason != c.Reason {
		n := *j
		n.PendingReason = c.Reason
		s.put(j, &n)
		return ApplyResult{Job: n}
	}
	return ApplyResult{Job: *j}
}

func (s *State) applyCancel(c *raftpb.CancelJob) ApplyResult {
	if a, ok := s.arrays[c.Id]; ok {
		// Cancelling an array cancels every task that has not ended.
		var ids []string
		s.idx.order.AscendGreaterOrEqual(&Job{CommitIndex: a.Template.CommitIndex}, func(j *Job) bool {
			if j.CommitIndex != a.Template.CommitIndex {
				return false
			}
			if !j.Phase.Terminal() {
				ids = append(ids, j.ID)
			}
			return true
		})
		if len(ids) == 0 {
			return ApplyResult{Job: a.Template, Err: errf(ErrConflict, "", "every task of array %s has already ended", c.Id)}
		}
		for _, id := range ids {
			s.cancelOne(s.jobs[id], c)
		}
		return ApplyResult{Job: a.Template}
	}
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase.Terminal() {
		return ApplyResult{Job: *j, Err: errf(ErrConflict, "", "job %s is already %s", j.ID, j.Phase)}
	}
	return ApplyResult{Job: s.cancelOne(j, c)}
}

func (s *State) cancelOne(j *Job, c *raftpb.CancelJob) Job {
	n := *j
	n.Phase = PhaseAborted
	n.FinishedAtMS = c.AtMs
	msg := "cancelled"
	if c.Reason != "" {
		msg = c.Reason
	}
	n.Error = &JobError{Code: "aborted", Message: msg}
	s.put(j, &n)
	return n
}

// A requeue's own time (at_ms) is the proposer's, recorded as the attempt's
// end and nothing else: it takes no part in the cluster clock, which an
// older node, ignorant of the field, would not move with it. Without one,
// the cluster clock's time stands in.
func (s *State) applyRequeue(c *raftpb.RequeueJob) ApplyResult {
	at := c.AtMs
	if at == 0 {
		at = s.clockMS
	}
	return s.requeue(c, at)
}

// requeue returns a running job to the queue; atMS is when (the command's
// own time, or its scheduler round's).
func (s *State) requeue(c *raftpb.RequeueJob, atMS int64) ApplyResult {
	j, err := s.lookup(c.Id)
	if err != nil {
		return ApplyResult{Err: err}
	}
	if j.Phase != PhaseRunning || j.Attempt != c.Attempt || (c.NodeId != "" && c.NodeId != j.NodeID) {
		return ApplyResult{Job: *j, Err: errf(ErrStaleAttempt, "", "job %s attempt %d is not running (job is %s at attempt %d on %q)", j.ID, c.Attempt, j.Phase, j.Attempt, j.NodeID)}
	}
	n := *j
	n.Phase = PhaseQueued
	reason := c.Reason
	if reason == "" {
		reason = "returned to the queue"
	}
	n.endAttempt("requeued", reason, atMS)
	s.put(j, &n)
	return ApplyResult{Job: n}
}

// applyPrune removes terminal jobs and finished arrays that ended before
// c.BeforeMs, oldest first, up to c.Max jobs (a whole array counts as its
// tasks and is never split). Their idempotency records go with them; the
// blobs they named are unreferenced and collected by each node.
func (s *State) applyPrune(c *raftpb.PruneJobs) ApplyResult {
	limit := int(c.Max)
	if limit <= 0 {
		limit = 10_000
	}
	var units []timeKey
	n := 0
	horizon := c.BeforeMs
	s.idx.ended.Ascend(func(k timeKey) bool {
		if k.at >= c.BeforeMs {
			return false
		}
		if n >= limit {
			horizon = k.at // cut short: only what ended before this is gone
			return false
		}
		units = append(units, k)
		if a, ok := s.arrays[k.id]; ok {
			n += int(a.Size)
		} else {
			n++
		}
		return true
	})
	for _, k := range units {
		if a, ok := s.arrays[k.id]; ok {
			s.removeArray(a)
			continue
		}
		if j, ok := s.jobs[k.id]; ok {
			s.put(j, nil)
			if j.IdempotencyKey != "" && s.idempotency[j.IdempotencyKey] == j.ID {
				delete(s.idempotency, j.IdempotencyKey)
			}
		}
	}
	if n > 0 {
		s.prunedBefore = max(s.prunedBefore, horizon)
	}
	return ApplyResult{Job: Job{Attempt: uint32(n)}}
}

func (s *State) removeArray(a *Array) {
	var tasks []*Job
	s.idx.order.AscendGreaterOrEqual(&Job{CommitIndex: a.Template.CommitIndex}, func(j *Job) bool {
		if j.CommitIndex != a.Template.CommitIndex {
			return false
		}
		tasks = append(tasks, j)
		return true
	})
	for _, j := range tasks {
		s.put(j, nil)
	}
	if _, ok := s.idx.ended.Delete(timeKey{a.EndedAtMS, a.Template.ID}); ok {
		s.idx.prunable -= uint64(a.Size)
	}
	if h := a.Template.ModuleHash; h != "" {
		if s.idx.blobRefs[h]--; s.idx.blobRefs[h] <= 0 {
			delete(s.idx.blobRefs, h)
		}
	}
	if k := a.Template.IdempotencyKey; k != "" && s.idempotency[k] == a.Template.ID {
		delete(s.idempotency, k)
	}
	delete(s.arrays, a.Template.ID)
	s.idx.arrays.Delete(a)
	s.touch(TopicJob(a.Template.ID))
}

func (s *State) applySetRetention(c *raftpb.SetRetention) ApplyResult {
	if c.RetentionMs < 0 {
		return ApplyResult{Err: errf(ErrInvalid, "use a positive duration, e.g. 24h", "negative retention")}
	}
	s.retentionMS = c.RetentionMs
	return ApplyResult{}
}

// runStart is when a run that result c reports began: c.ran_us before the
// result's time (rounded up to the millisecond), but never before the
// placement (the worker's clock and the leader's differ) nor after the
// result. Without ran_us, the start stays the placement time.
func runStart(j Job, c *raftpb.FinishJob) int64 {
	if c.RanUs <= 0 {
		return j.StartedAtMS
	}
	placed := j.PlacedAtMS
	if placed == 0 { // placed before placed_at_ms was recorded
		placed = j.StartedAtMS
	}
	return min(max(placed, c.AtMs-(c.RanUs+999)/1000), c.AtMs)
}

// applyRunHere records a job its API node ran at once (RunHere): the
// submission, its placement there as attempt 1 and the result, in that
// order, as their own commands would apply. A repeated submission answers
// with the job it made and the run is dropped; a node that may take no
// work, or a job that must be placed by the scheduler (one awaiting
// approval, a skill's run), leaves the job queued: it is then scheduled as
// usual and the run here is dropped. The result is fenced as any result.
func (s *State) applyRunHere(index uint64, c *raftpb.RunHere) ApplyResult {
	j, res, fresh := s.submitted(index, c.GetSubmit())
	if !fresh {
		return res // refused, or the original of a repeated submission
	}
	if j.Phase != PhaseQueued || c.GetFinish() == nil || !MayRunBeforeAcceptance(c.Submit.Job) {
		return s.acceptQueued(j)
	}
	m, ok := s.id.members["node:"+c.NodeId]
	if !ok || m.Revoked || m.Ineligible || m.Draining {
		return s.acceptQueued(j)
	}
	// Placed no earlier than submitted: the placement carries the
	// leader's clock, the submission its proposer's. The job goes into
	// the state once, as it ends: what the three commands would leave,
	// without the indexes and wake-ups of the two states between
	// (TestRunHereAsItsThreeCommands).
	n := placed(j, &raftpb.AssignJob{Id: j.ID, Attempt: 1, NodeId: c.NodeId, AtMs: max(c.PlacedAtMs, j.SubmittedAtMS)})
	fin := c.Finish // this replica's own decoded copy of the entry
	fin.Id, fin.Attempt, fin.NodeId, fin.EndedOutput = j.ID, 1, c.NodeId, false
	n = finished(n, fin)
	s.accept(&n)
	return ApplyResult{Job: n}
}

// acceptQueued accepts submitted job j as it is (queued, or waiting for
// approval) and answers with it. A copy is stored, so that j itself stays
// on the caller's stack on the path that stores another job.
func (s *State) acceptQueued(j Job) ApplyResult {
	s.accept(&j)
	return ApplyResult{Job: j}
}

// MayRunBeforeAcceptance reports whether the job r describes is one a
// node may run before it is accepted (RunHere): a wasm job whose run has
// no effect but its output and that no one else decides on (no grants,
// skill, hook, approval, deadline, stored input or schema). The API
// proposes RunHere only for such jobs; the FSM holds every entry to it, so
// a node that sends one for another job gets the job queued instead, its
// run dropped.
func MayRunBeforeAcceptance(r *raftpb.JobRecord) bool {
	return r.GetKind() == "wasm" && r.SkillId == "" && r.HookId == "" && !r.RequiresApproval && r.DeadlineAtMs == 0 &&
		len(r.SecretNames) == 0 && r.KvPrefix == "" && len(r.AllowHosts) == 0 && !r.AllowPrivate &&
		r.InputSha256 == "" && r.OutputSchema == "" && r.InputSchema == ""
}
