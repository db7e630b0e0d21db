package consensus

import (
	"crypto/subtle"
	"sort"
	"strconv"
	"strings"

	"github.com/google/btree"
)

// Array is a job array as the cluster keeps it: the template its tasks
// share (Input empty) and how many tasks are in each phase.
type Array struct {
	Template  Job
	Size      uint32
	Counts    [16]uint32 // by Phase
	EndedAtMS int64      // when the last task ended (once all have)
}

// Terminal reports whether every task has ended.
func (a *Array) Terminal() bool {
	var n uint32
	for _, p := range AllPhases {
		if p.Terminal() {
			n += a.Counts[p]
		}
	}
	return n == a.Size
}

// Count is the number of tasks in phase p.
func (a *Array) Count(p Phase) uint32 { return a.Counts[p] }

// Job returns a copy of job id.
// IdempotentJob returns the job a scoped idempotency key (submitter/key)
// names when it is a single job whose payload hash is payload: what a
// submission carrying that key is answered with (the replay).
func (s *State) IdempotentJob(key string, payload []byte) (Job, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	id, ok := s.idempotency[key]
	if !ok {
		return Job{}, false
	}
	j, ok := s.jobs[id]
	if !ok || subtle.ConstantTimeCompare(j.PayloadHash, payload) != 1 {
		return Job{}, false
	}
	return *j, true
}

func (s *State) Job(id string) (Job, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	j, ok := s.jobs[id]
	if !ok {
		return Job{}, false
	}
	return *j, true
}

// Array returns a copy of array id.
func (s *State) Array(id string) (Array, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.arrays[id]
	if !ok {
		return Array{}, false
	}
	return *a, true
}

// JobFilter selects jobs; zero fields match everything.
type JobFilter struct {
	Phase   Phase
	NodeID  string // jobs whose last placement was on this node
	ArrayID string // the tasks of one array, in task order
	AfterID string // continue after this id (in the listing's order)
	// AfterCommit is AfterID's commit index: with it, a listing goes on
	// from where AfterID was even once that job is gone (pruned).
	AfterCommit uint64
	Limit       int  // 0 = no limit
	Newest      bool // newest first (default: acceptance order)
}

// Jobs returns copies of matching jobs. It walks the narrowest index for
// the filter, so its cost follows the jobs it returns (plus those it
// skips by a second condition), not the jobs ever submitted.
func (s *State) Jobs(f JobFilter) []Job {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Job
	emit := func(j *Job) bool {
		if f.Phase != PhaseUnknown && j.Phase != f.Phase {
			return true
		}
		if f.NodeID != "" && j.NodeID != f.NodeID {
			return true
		}
		out = append(out, *j)
		return f.Limit <= 0 || len(out) < f.Limit
	}
	if f.ArrayID != "" {
		a := s.arrays[f.ArrayID]
		if a == nil {
			return nil
		}
		// Tasks are contiguous in acceptance order.
		idx := a.Template.CommitIndex
		in := func(j *Job) bool {
			if j.CommitIndex != idx || j.ArrayID != f.ArrayID {
				return false
			}
			return emit(j)
		}
		var pivot *Job
		if after, ok := s.jobs[f.AfterID]; ok && after.ArrayID == f.ArrayID {
			pivot = after
		}
		switch {
		case f.Newest && pivot != nil:
			s.idx.order.DescendLessOrEqual(pivot, func(j *Job) bool { return j == pivot || j.ID == pivot.ID || in(j) })
		case f.Newest:
			s.idx.order.DescendLessOrEqual(&Job{CommitIndex: idx, ArrayIndex: a.Size}, in)
		case pivot != nil:
			s.idx.order.AscendGreaterOrEqual(pivot, func(j *Job) bool { return j.ID == pivot.ID || in(j) })
		default:
			s.idx.order.AscendGreaterOrEqual(&Job{CommitIndex: idx}, in)
		}
		return out
	}
	if f.NodeID != "" && f.Phase == PhaseRunning {
		// The running set is small: sort it into acceptance order.
		t := btree.NewG(btreeDegree, orderLess)
		for _, j := range s.idx.running[f.NodeID] {
			t.ReplaceOrInsert(j)
		}
		s.walk(t, f, emit)
		return out
	}
	var t *btree.BTreeG[*Job]
	switch {
	case f.Phase != PhaseUnknown:
		t = s.idx.byPhase[f.Phase]
	case f.NodeID != "":
		t = s.idx.byNode[f.NodeID]
	default:
		t = s.idx.order
	}
	if t == nil {
		return nil
	}
	s.walk(t, f, emit)
	return out
}

// taskIndex is the index a task id ends with ("j-….17": 17); 0 for a job's id.
func taskIndex(id string) uint32 {
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseUint(id[i+1:], 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// walk visits t from after f.AfterID (or the start) in f's direction.
func (s *State) walk(t *btree.BTreeG[*Job], f JobFilter, visit func(*Job) bool) {
	if f.AfterID != "" {
		after, ok := s.jobs[f.AfterID]
		if !ok && f.AfterCommit > 0 {
			// Gone: a stand-in at its place (acceptance order is commit
			// index, task index, id; a task's index ends its id).
			after, ok = &Job{ID: f.AfterID, CommitIndex: f.AfterCommit, ArrayIndex: taskIndex(f.AfterID)}, true
		}
		if ok {
			if f.Newest {
				t.DescendLessOrEqual(after, func(j *Job) bool { return j.ID == after.ID || visit(j) })
			} else {
				t.AscendGreaterOrEqual(after, func(j *Job) bool { return j.ID == after.ID || visit(j) })
			}
			return
		}
	}
	if f.Newest {
		t.Descend(visit)
	} else {
		t.Ascend(visit)
	}
}

// Arrays returns copies of up to limit arrays (0: all), newest first or
// in acceptance order, after the array afterID (a page cursor; "" from
// the start; one that no longer exists, pruned since, ends the listing
// rather than start it again).
func (s *State) Arrays(afterID string, limit int, newest bool) []Array {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.arrays[afterID]; afterID != "" && !ok {
		return nil
	}
	var out []Array
	visit := func(a *Array) bool {
		if a.Template.ID == afterID {
			return true
		}
		out = append(out, *a)
		return limit <= 0 || len(out) < limit
	}
	after := s.arrays[afterID]
	switch {
	case after != nil && newest:
		s.idx.arrays.DescendLessOrEqual(after, visit)
	case after != nil:
		s.idx.arrays.AscendGreaterOrEqual(after, visit)
	case newest:
		s.idx.arrays.Descend(visit)
	default:
		s.idx.arrays.Ascend(visit)
	}
	return out
}

// CountByPhase counts jobs in each phase (array tasks included).
func (s *State) CountByPhase() map[Phase]uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := make(map[Phase]uint64, len(s.idx.phases))
	for p, n := range s.idx.phases {
		if n > 0 {
			m[p] = n
		}
	}
	return m
}

// Count is the number of jobs in phase p.
func (s *State) Count(p Phase) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.idx.phases[p]
}

// Queued calls fn for the queued jobs of kind in placement order
// (priority, then acceptance) until fn returns false. fn runs under the
// state's read lock: it must not read the state again (a second read
// lock waits behind a waiting writer, which waits for the first: every
// apply stops).
func (s *State) Queued(kind string, fn func(Job) bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if q := s.idx.queue[kind]; q != nil {
		q.Ascend(func(j *Job) bool { return fn(*j) })
	}
}

// QueueAhead counts the queued jobs placed before job id (same kind,
// placement order: priority, then acceptance), stopping at limit: a deep
// queue costs a read at most limit steps. ok is false if id is not queued.
func (s *State) QueueAhead(id string, limit int) (n int, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	j := s.jobs[id]
	if j == nil || j.Phase != PhaseQueued {
		return 0, false
	}
	q := s.idx.queue[j.Kind]
	if q == nil {
		return 0, false
	}
	q.Ascend(func(o *Job) bool {
		if o == j || !queueLess(o, j) || n >= limit {
			return false
		}
		n++
		return true
	})
	return n, true
}

// FirstQueuedTask is array id's first queued task (in placement order),
// found by a seek in its kind's queue.
func (s *State) FirstQueuedTask(id string) (Job, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a := s.arrays[id]
	if a == nil {
		return Job{}, false
	}
	q := s.idx.queue[a.Template.Kind]
	if q == nil {
		return Job{}, false
	}
	var out *Job
	// Its tasks share the priority and the commit index: they sit
	// together in the queue, in task order.
	q.AscendGreaterOrEqual(&Job{Priority: a.Template.Priority, CommitIndex: a.Template.CommitIndex}, func(j *Job) bool {
		if j.ArrayID == id {
			out = j
			return false
		}
		return j.Priority == a.Template.Priority && j.CommitIndex == a.Template.CommitIndex // another job of its entry
	})
	if out == nil {
		return Job{}, false
	}
	return *out, true
}

// QueuedReady reports whether one of the first limit queued jobs of kind
// waits for a placement it could get now: not backing off before a retry
// (NotBeforeMS) and not held by a reason the scheduler gave it (no node
// matches its constraints, none has capacity). A node runs a job where it
// is submitted only while none does: those go first. A deep queue costs
// at most limit steps; past them it answers false.
func (s *State) QueuedReady(kind string, nowMS int64, limit int) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	q := s.idx.queue[kind]
	if q == nil {
		return false
	}
	ready, n := false, 0
	q.Ascend(func(j *Job) bool {
		if j.NotBeforeMS <= nowMS && j.PendingReason == "" {
			ready = true
			return false
		}
		n++
		return n < limit
	})
	return ready
}

// QueuedCount is how many jobs of kind are queued.
func (s *State) QueuedCount(kind string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if q := s.idx.queue[kind]; q != nil {
		return q.Len()
	}
	return 0
}

// QueuedKinds lists the kinds that have queued jobs, sorted.
func (s *State) QueuedKinds() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.idx.queue))
	for k := range s.idx.queue {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// RunningOn returns the jobs running on node (in no particular order).
func (s *State) RunningOn(node string) []Job {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := s.idx.running[node]
	out := make([]Job, 0, len(m))
	for _, j := range m {
		out = append(out, *j)
	}
	return out
}

// RunningCounts returns, per node, how many jobs of each kind run there.
func (s *State) RunningCounts() map[string]map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]map[string]int, len(s.idx.running))
	for n, m := range s.idx.running {
		c := map[string]int{}
		for _, j := range m {
			c[j.Kind]++
		}
		out[n] = c
	}
	return out
}

// RunningNodes lists the nodes that have running jobs.
func (s *State) RunningNodes() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.idx.running))
	for n := range s.idx.running {
		out = append(out, n)
	}
	return out
}

// DeadlinesBefore returns up to limit unfinished jobs whose deadline is at
// or before ms, earliest first.
func (s *State) DeadlinesBefore(ms int64, limit int) []Job {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Job
	s.idx.deadlines.Ascend(func(k timeKey) bool {
		if k.at > ms || len(out) >= limit {
			return false
		}
		if j := s.jobs[k.id]; j != nil {
			out = append(out, *j)
		}
		return true
	})
	return out
}

// OldestEnded is when the longest-ended prunable job or array ended.
func (s *State) OldestEnded() (int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok := s.idx.ended.Min()
	return k.at, ok
}

// BlobReferenced reports whether any job or array still names blob hash.
func (s *State) BlobReferenced(hash string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.idx.blobRefs[hash] > 0
}

// Retention is how long terminal jobs are kept, in milliseconds.
func (s *State) Retention() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.retentionMS <= 0 {
		return DefaultRetentionMS
	}
	return s.retentionMS
}

// PrunedBefore is the pruning horizon: every job that ended before it
// (ms since the epoch) has been pruned; 0 if nothing was ever pruned. An
// unknown job id may have named one of them.
func (s *State) PrunedBefore() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.prunedBefore
}

// EndedBefore is how many jobs a prune to beforeMS would remove (array
// tasks count one each, as applyPrune counts them). It walks the ended
// units before the cut-off, not the jobs held.
func (s *State) EndedBefore(beforeMS int64) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n uint64
	s.idx.ended.Ascend(func(k timeKey) bool {
		if k.at >= beforeMS {
			return false
		}
		if a, ok := s.arrays[k.id]; ok {
			n += uint64(a.Size)
		} else {
			n++
		}
		return true
	})
	return n
}

// Prunable is the number of jobs a prune could remove: ended jobs outside
// arrays and the tasks of finished arrays (not the ended tasks of an array
// still running: an array goes whole).
func (s *State) Prunable() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.idx.prunable
}

// JobCount is the number of jobs held (array tasks included).
func (s *State) JobCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.jobs)
}

// StaleResults counts results refused because their attempt was not current.
func (s *State) StaleResults() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.staleResults
}

// LiveModules lists the modules (by hash) that unfinished wasm jobs run:
// queued, waiting or running anywhere in the cluster. Its size follows the
// distinct modules in use, not the jobs. Watch TopicModules to learn of a
// new one.
func (s *State) LiveModules() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.idx.modules))
	for h := range s.idx.modules {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}
