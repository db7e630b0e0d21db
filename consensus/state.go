package consensus

import (
	"sort"
	"sync"
)

// State is the FSM's in-memory view: jobs by id plus acceptance order.
// Readers take the read lock; Apply holds the write lock only while it
// mutates, so reads never see a half-applied command.
type State struct {
	mu           sync.RWMutex
	jobs         map[string]*Job
	order        []string // ids in acceptance (commit) order
	staleResults uint64
	applied      uint64
	id           identityState
	idempotency  map[string]string // idempotency key → job id
	data         dataState

	// changed is closed and replaced after every applied command: a cheap
	// broadcast for watchers (scheduler, worker, WatchJob streams).
	changed chan struct{}
}

func newState() *State {
	return &State{jobs: make(map[string]*Job), id: newIdentityState(), idempotency: map[string]string{}, data: newDataState(), changed: make(chan struct{})}
}

// Changed returns a channel closed at the next state change.
func (s *State) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.changed
}

// AppliedIndex is the raft index of the last command applied to this state.
func (s *State) AppliedIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

// Job returns a copy of job id.
func (s *State) Job(id string) (Job, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	j, ok := s.jobs[id]
	if !ok {
		return Job{}, false
	}
	return j.clone(), true
}

// JobFilter selects jobs; zero fields match everything.
type JobFilter struct {
	Phase   Phase
	NodeID  string
	AfterID string // continue after this id in acceptance order
	Limit   int    // 0 = no limit
}

// Jobs returns copies of matching jobs in acceptance order.
func (s *State) Jobs(f JobFilter) []Job {
	s.mu.RLock()
	defer s.mu.RUnlock()
	start := 0
	if f.AfterID != "" {
		if j, ok := s.jobs[f.AfterID]; ok {
			// order is sorted by CommitIndex: binary search the position.
			start = sort.Search(len(s.order), func(i int) bool {
				return s.jobs[s.order[i]].CommitIndex > j.CommitIndex
			})
		}
	}
	var out []Job
	for _, id := range s.order[start:] {
		j := s.jobs[id]
		if f.Phase != PhaseUnknown && j.Phase != f.Phase {
			continue
		}
		if f.NodeID != "" && j.NodeID != f.NodeID {
			continue
		}
		out = append(out, j.clone())
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
	}
	return out
}

// CountByPhase counts jobs in each phase.
func (s *State) CountByPhase() map[Phase]uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := make(map[Phase]uint64)
	for _, j := range s.jobs {
		m[j.Phase]++
	}
	return m
}

// StaleResults counts results refused because their attempt was not current.
func (s *State) StaleResults() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.staleResults
}
