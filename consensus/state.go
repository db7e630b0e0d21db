package consensus

import (
	"sync"

	"github.com/google/btree"
)

// State is the FSM's in-memory view. Every job value in it is immutable:
// Apply replaces a changed job with a new value, so readers and snapshots
// may hold pointers without copying, and every index is maintained in one
// place (put) as jobs change. Nothing taken per commit or per request
// walks all jobs ever submitted: each question has an index.
//
// Readers take the read lock; Apply holds the write lock only while it
// mutates, so reads never see a half-applied command.
type State struct {
	mu           sync.RWMutex
	jobs         map[string]*Job
	staleResults uint64
	applied      uint64
	id           identityState
	idempotency  map[string]string // idempotency key → job id
	data         dataState
	journal      journal  // the audit journal (journal.go)
	ended        []string // jobs that ended in the entry being applied, for after_run hooks
	idx          indexes
	arrays       map[string]*Array
	retentionMS  int64 // 0 = DefaultRetention
	prunedBefore int64 // pruning horizon: see PrunedBefore
	clockMS      int64 // the cluster clock: latest proposal time applied (clock.go)

	// changed is closed and replaced after every applied command (for
	// waiters on an applied index); topics wake watchers of one thing.
	changed chan struct{}
	topics  map[string]chan struct{}
}

// indexes are the State's secondary indexes, maintained by put.
type indexes struct {
	order     *btree.BTreeG[*Job]            // every job, acceptance order
	byPhase   map[Phase]*btree.BTreeG[*Job]  // per phase, acceptance order
	byNode    map[string]*btree.BTreeG[*Job] // jobs placed on a node (last placement), acceptance order
	queue     map[string]*btree.BTreeG[*Job] // kind → queued jobs in placement order
	running   map[string]map[string]*Job     // node → running job id → job
	deadlines *btree.BTreeG[timeKey]         // unfinished jobs with a deadline
	ended     *btree.BTreeG[timeKey]         // prunable units: terminal jobs outside arrays, finished arrays
	prunable  uint64                         // jobs in those units (an array counts as its tasks)
	phases    map[Phase]uint64               // count per phase
	blobRefs  map[string]int                 // blob hash → references from jobs and arrays
	modules   map[string]int                 // module hash → unfinished wasm jobs that run it
	arrays    *btree.BTreeG[*Array]          // every array, acceptance order (Arrays)
	free      *btree.FreeListG[*Job]         // shared by the job trees
	freeTime  *btree.FreeListG[timeKey]      // shared by the time trees
}

// timeKey orders by time, then id.
type timeKey struct {
	at int64
	id string
}

func timeLess(a, b timeKey) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.id < b.id
}

// runsModule reports whether j is an unfinished wasm job (it counts in
// LiveModules).
func runsModule(j *Job) bool {
	return j.Kind == "wasm" && j.ModuleHash != "" && !j.Phase.Terminal()
}

// orderLess is acceptance order: commit index, then task index, then id.
// One entry can accept several jobs at one index that are not tasks of an
// array (the submits of a batch, the jobs of hooks fired together), so the
// id keeps them apart: without it the trees would hold only one of them.
func orderLess(a, b *Job) bool {
	if a.CommitIndex != b.CommitIndex {
		return a.CommitIndex < b.CommitIndex
	}
	if a.ArrayIndex != b.ArrayIndex {
		return a.ArrayIndex < b.ArrayIndex
	}
	return a.ID < b.ID
}

// queueLess is placement order: higher priority first, then acceptance.
func queueLess(a, b *Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return orderLess(a, b)
}

// arrayLess orders arrays by acceptance: commit index, then id.
func arrayLess(a, b *Array) bool {
	if a.Template.CommitIndex != b.Template.CommitIndex {
		return a.Template.CommitIndex < b.Template.CommitIndex
	}
	return a.Template.ID < b.Template.ID
}

const btreeDegree = 32

func newIndexes() indexes {
	free := btree.NewFreeListG[*Job](1024)
	return indexes{
		order:     btree.NewWithFreeListG(btreeDegree, orderLess, free),
		byPhase:   map[Phase]*btree.BTreeG[*Job]{},
		byNode:    map[string]*btree.BTreeG[*Job]{},
		queue:     map[string]*btree.BTreeG[*Job]{},
		running:   map[string]map[string]*Job{},
		deadlines: btree.NewG(btreeDegree, timeLess),
		ended:     btree.NewG(btreeDegree, timeLess),
		phases:    map[Phase]uint64{},
		blobRefs:  map[string]int{},
		modules:   map[string]int{},
		arrays:    btree.NewG(btreeDegree, arrayLess),
		free:      free,
	}
}

func newState() *State {
	return &State{jobs: make(map[string]*Job), id: newIdentityState(), idempotency: map[string]string{},
		data: newDataState(), idx: newIndexes(), arrays: map[string]*Array{},
		changed: make(chan struct{}), topics: map[string]chan struct{}{}}
}

// Topics a watcher can wait on (see Watch).
const (
	// TopicQueue changes when the queue or the capacity in use changes:
	// a job was queued, placed, finished, requeued or cancelled.
	TopicQueue = "queue"
	// TopicMembers changes when a member is added, revoked, or its
	// scheduling eligibility changes, or a certificate is revoked.
	TopicMembers = "members"
	// TopicPolicy changes when the policy is set.
	TopicPolicy = "policy"
	// TopicModules changes when a module gets its first unfinished job
	// (see LiveModules).
	TopicModules = "modules"
)

// TopicJob changes whenever job id (or array id) changes.
func TopicJob(id string) string { return "job/" + id }

// TopicNode changes whenever a job is placed on, or leaves, node id.
func TopicNode(id string) string { return "node/" + id }

// Watch returns a channel closed at the next change of topic. Take it
// before reading the state it guards, then wait: no change is missed.
func (s *State) Watch(topic string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.topics[topic]
	if !ok {
		ch = make(chan struct{})
		s.topics[topic] = ch
	}
	return ch
}

// touch wakes topic's watchers; the caller holds s.mu.
func (s *State) touch(topic string) {
	if ch, ok := s.topics[topic]; ok {
		close(ch)
		delete(s.topics, topic)
	}
}

// Changed returns a channel closed at the next applied command, whatever
// it changed. Prefer Watch: this wakes on every commit.
func (s *State) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.changed
}

// AppliedIndex is the raft index of the last entry applied to this state:
// a command, or a configuration change (FSM.StoreConfiguration).
func (s *State) AppliedIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

func (s *State) phaseTree(p Phase) *btree.BTreeG[*Job] {
	t, ok := s.idx.byPhase[p]
	if !ok {
		t = btree.NewWithFreeListG(btreeDegree, orderLess, s.idx.free)
		s.idx.byPhase[p] = t
	}
	return t
}

func (s *State) nodeTree(n string) *btree.BTreeG[*Job] {
	t, ok := s.idx.byNode[n]
	if !ok {
		t = btree.NewWithFreeListG(btreeDegree, orderLess, s.idx.free)
		s.idx.byNode[n] = t
	}
	return t
}

// blobsOf lists the blobs a job refers to (duplicates allowed).
func blobsOf(j *Job, f func(string)) {
	for _, h := range [...]string{j.ModuleHash, j.InputHash, j.StdoutHash, j.StderrHash} {
		if h != "" {
			f(h)
		}
	}
	for _, a := range j.Artifacts {
		if a.SHA256 != "" {
			f(a.SHA256)
		}
	}
}

// swap replaces a job with nw, a copy that differs only in fields no index
// orders by and no watcher waits on (a key-value write's sequence number):
// the trees and maps get the new pointer, nobody is woken. A job's
// watchers and its worker's reconcile were woken by every write of a job
// writing many keys. The caller holds s.mu.
func (s *State) swap(nw *Job) {
	x := &s.idx
	x.order.ReplaceOrInsert(nw)
	s.phaseTree(nw.Phase).ReplaceOrInsert(nw)
	if nw.NodeID != "" {
		s.nodeTree(nw.NodeID).ReplaceOrInsert(nw)
	}
	switch nw.Phase {
	case PhaseQueued:
		x.queue[nw.Kind].ReplaceOrInsert(nw)
	case PhaseRunning:
		x.running[nw.NodeID][nw.ID] = nw
	}
	s.jobs[nw.ID] = nw
}

// put replaces old with nw in the state and every index (old nil: insert;
// nw nil: delete) and wakes the topics the change concerns. Every job
// mutation goes through here. The caller holds s.mu.
func (s *State) put(old, nw *Job) {
	x := &s.idx
	if old != nil {
		x.phases[old.Phase]--
		s.phaseTree(old.Phase).Delete(old)
		if old.NodeID != "" {
			t := s.nodeTree(old.NodeID)
			t.Delete(old)
			if nw == nil && t.Len() == 0 {
				delete(x.byNode, old.NodeID)
			}
		}
		switch old.Phase {
		case PhaseQueued:
			if q := x.queue[old.Kind]; q != nil {
				q.Delete(old)
				if q.Len() == 0 {
					delete(x.queue, old.Kind)
				}
			}
		case PhaseRunning:
			if m := x.running[old.NodeID]; m != nil {
				delete(m, old.ID)
				if len(m) == 0 {
					delete(x.running, old.NodeID)
				}
			}
		}
		if !old.Phase.Terminal() && old.DeadlineAtMS > 0 {
			x.deadlines.Delete(timeKey{old.DeadlineAtMS, old.ID})
		}
		if old.Phase.Terminal() && old.ArrayID == "" {
			x.ended.Delete(timeKey{old.FinishedAtMS, old.ID})
			x.prunable--
		}
		blobsOf(old, func(h string) {
			if x.blobRefs[h]--; x.blobRefs[h] <= 0 {
				delete(x.blobRefs, h)
			}
		})
		if runsModule(old) {
			if x.modules[old.ModuleHash]--; x.modules[old.ModuleHash] <= 0 {
				delete(x.modules, old.ModuleHash)
			}
		}
		if a := s.arrays[old.ArrayID]; a != nil {
			a.Counts[old.Phase]--
		}
		if nw == nil {
			x.order.Delete(old)
			delete(s.jobs, old.ID)
		}
		s.touch(TopicJob(old.ID))
		if old.Phase == PhaseRunning {
			s.touch(TopicNode(old.NodeID))
		}
	}
	if nw != nil && len(s.data.hooks) > 0 && nw.Phase.Terminal() && (old == nil || !old.Phase.Terminal()) && nw.HookID == "" && nw.ArrayID == "" {
		s.ended = append(s.ended, nw.ID)
	}
	if nw != nil {
		x.phases[nw.Phase]++
		x.order.ReplaceOrInsert(nw)
		s.phaseTree(nw.Phase).ReplaceOrInsert(nw)
		if nw.NodeID != "" {
			s.nodeTree(nw.NodeID).ReplaceOrInsert(nw)
		}
		switch nw.Phase {
		case PhaseQueued:
			q := x.queue[nw.Kind]
			if q == nil {
				q = btree.NewWithFreeListG(btreeDegree, queueLess, x.free)
				x.queue[nw.Kind] = q
			}
			q.ReplaceOrInsert(nw)
		case PhaseRunning:
			m := x.running[nw.NodeID]
			if m == nil {
				m = map[string]*Job{}
				x.running[nw.NodeID] = m
			}
			m[nw.ID] = nw
			s.touch(TopicNode(nw.NodeID))
		}
		if !nw.Phase.Terminal() && nw.DeadlineAtMS > 0 {
			x.deadlines.ReplaceOrInsert(timeKey{nw.DeadlineAtMS, nw.ID})
		}
		if nw.Phase.Terminal() && nw.ArrayID == "" {
			x.ended.ReplaceOrInsert(timeKey{nw.FinishedAtMS, nw.ID})
			x.prunable++
		}
		blobsOf(nw, func(h string) { x.blobRefs[h]++ })
		if runsModule(nw) {
			if x.modules[nw.ModuleHash] == 0 {
				s.touch(TopicModules)
			}
			x.modules[nw.ModuleHash]++
		}
		s.jobs[nw.ID] = nw
		s.touch(TopicJob(nw.ID))
		if a := s.arrays[nw.ArrayID]; a != nil {
			a.Counts[nw.Phase]++
			if nw.Phase.Terminal() && (old == nil || !old.Phase.Terminal()) {
				a.EndedAtMS = max(a.EndedAtMS, nw.FinishedAtMS)
				if a.Terminal() {
					x.ended.ReplaceOrInsert(timeKey{a.EndedAtMS, a.Template.ID})
					x.prunable += uint64(a.Size)
				}
			}
			s.touch(TopicJob(nw.ArrayID))
		}
	}
	wasQueued := old != nil && old.Phase == PhaseQueued
	isQueued := nw != nil && nw.Phase == PhaseQueued
	wasRunning := old != nil && old.Phase == PhaseRunning
	isRunning := nw != nil && nw.Phase == PhaseRunning
	if wasQueued != isQueued || wasRunning != isRunning || (isQueued && old != nil && old.NotBeforeMS != nw.NotBeforeMS) {
		s.touch(TopicQueue)
	}
}
