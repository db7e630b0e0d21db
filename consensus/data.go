package consensus

import (
	"strings"

	"github.com/google/btree"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Limits on replicated key-value data, enforced deterministically in Apply.
const (
	MaxKVKey     = 512
	MaxKVValue   = 64 << 10
	MaxKVEntries = 100_000
	MaxSecrets   = 10_000
	MaxSecretLen = 64 << 10
)

// Secret is a stored secret: its value sealed with the cluster data key.
type Secret struct {
	Name    string
	Sealed  []byte
	SetAtMS int64
	SetBy   string
}

// dataState holds secrets and the key-value store.
type dataState struct {
	secrets    map[string]*Secret
	kv         map[string][]byte
	kvKeys     *btree.BTreeG[string]              // kv's keys in order (KVList, snapshots)
	skills     map[string]*raftpb.SkillRecord     // by skill_id (skills.go)
	publishers map[string]*raftpb.PublisherRecord // by name
	hooks      map[string]*raftpb.HookRecord      // by id (hooks.go)
}

func newDataState() dataState {
	return dataState{secrets: map[string]*Secret{}, kv: map[string][]byte{}, kvKeys: btree.NewOrderedG[string](btreeDegree),
		skills: map[string]*raftpb.SkillRecord{}, publishers: map[string]*raftpb.PublisherRecord{},
		hooks: map[string]*raftpb.HookRecord{}}
}

func (s *State) applySetSecret(c *raftpb.SetSecret) ApplyResult {
	switch {
	case c.Name == "" || len(c.Name) > 256:
		return ApplyResult{Err: errf(ErrInvalid, "use a name of 1 to 256 characters", "bad secret name")}
	case len(c.Sealed) > MaxSecretLen+64:
		return ApplyResult{Err: errf(ErrInvalid, "secrets are at most 64 KiB", "secret %s is too large", c.Name)}
	}
	if _, ok := s.data.secrets[c.Name]; !ok && len(s.data.secrets) >= MaxSecrets {
		return ApplyResult{Err: errf(ErrInvalid, "delete unused secrets", "the cluster holds %d secrets, its limit", MaxSecrets)}
	}
	s.data.secrets[c.Name] = &Secret{Name: c.Name, Sealed: c.Sealed, SetAtMS: c.AtMs, SetBy: c.By}
	return ApplyResult{}
}

func (s *State) applyDeleteSecret(c *raftpb.DeleteSecret) ApplyResult {
	if _, ok := s.data.secrets[c.Name]; !ok {
		return ApplyResult{Err: errf(ErrNotFound, "list them with 'palyra secret list'", "no secret named %q", c.Name)}
	}
	delete(s.data.secrets, c.Name)
	return ApplyResult{}
}

func (s *State) applyKVPut(c *raftpb.KVPut) ApplyResult {
	switch {
	case c.Key == "" || len(c.Key) > MaxKVKey:
		return ApplyResult{Err: errf(ErrInvalid, "", "key-value keys are 1 to %d bytes", MaxKVKey)}
	case len(c.Value) > MaxKVValue:
		return ApplyResult{Err: errf(ErrInvalid, "", "key-value values are at most %d bytes", MaxKVValue)}
	}
	if err := s.fenceWrite(c.JobId, c.Attempt, c.NodeId); err != nil {
		return ApplyResult{Err: err}
	}
	if s.kvRetry(c.JobId, c.Run, c.Seq) {
		return ApplyResult{}
	}
	if _, ok := s.data.kv[c.Key]; !ok && len(s.data.kv) >= MaxKVEntries {
		return ApplyResult{Err: errf(ErrInvalid, "delete unused keys", "the key-value store holds %d entries, its limit", MaxKVEntries)}
	}
	s.kvApplied(c.JobId, c.Run, c.Seq)
	s.data.kv[c.Key] = append([]byte(nil), c.Value...)
	s.data.kvKeys.ReplaceOrInsert(c.Key)
	return ApplyResult{}
}

func (s *State) applyKVDelete(c *raftpb.KVDelete) ApplyResult {
	if err := s.fenceWrite(c.JobId, c.Attempt, c.NodeId); err != nil {
		return ApplyResult{Err: err}
	}
	if s.kvRetry(c.JobId, c.Run, c.Seq) {
		return ApplyResult{}
	}
	s.kvApplied(c.JobId, c.Run, c.Seq)
	delete(s.data.kv, c.Key)
	s.data.kvKeys.Delete(c.Key)
	return ApplyResult{}
}

// kvRetry reports whether write seq of one run of a job's attempt (fenced
// before: the job runs at that attempt) was applied already: the worker
// sent it again because it never learnt the first one's outcome (a leader
// lost under it). Applied twice, a put could overwrite another job's later
// write to the key. run is the worker's nonce for the run: an attempt run
// again on its node (its result could not be recorded) numbers its writes
// from 1 again, and they are new.
func (s *State) kvRetry(job string, run, seq uint64) bool {
	if job == "" || seq == 0 || run == 0 {
		return false
	}
	j := s.jobs[job]
	return j.KVSeqRun == run && seq <= j.KVSeq
}

// kvApplied records write seq of run as the job's last applied one.
func (s *State) kvApplied(job string, run, seq uint64) {
	if job == "" || seq == 0 || run == 0 {
		return
	}
	j := s.jobs[job]
	n := *j
	n.KVSeq, n.KVSeqRun = seq, run
	s.swap(&n)
}

// fenceWrite refuses a job's write unless the job is running at attempt
// on node: a write from a superseded attempt (re-queued, re-placed,
// cancelled, ended) changes nothing, as its result would not. A write
// that names no job is an operator's.
func (s *State) fenceWrite(job string, attempt uint32, node string) error {
	if job == "" {
		return nil
	}
	j, ok := s.jobs[job]
	if !ok || j.Phase != PhaseRunning || j.Attempt != attempt || j.NodeID != node {
		s.staleResults++
		return errf(ErrStaleAttempt, "", "write of job %s attempt %d from %q refused: the attempt is no longer current", job, attempt, node)
	}
	return nil
}

// Secret returns a stored secret (sealed).
func (s *State) Secret(name string) (Secret, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sec, ok := s.data.secrets[name]
	if !ok {
		return Secret{}, false
	}
	return *sec, true
}

// Secrets lists secrets by name (sealed values included; callers must not
// expose them).
func (s *State) Secrets() []Secret {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Secret, 0, len(s.data.secrets))
	for _, k := range sortedKeys(s.data.secrets) {
		out = append(out, *s.data.secrets[k])
	}
	return out
}

// KV returns the value of key.
func (s *State) KV(key string) ([]byte, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.data.kv[key]
	return append([]byte(nil), v...), ok
}

// KVEntry is one key and its value.
type KVEntry struct {
	Key   string
	Value []byte
}

// KVList lists, in key order, up to limit entries whose key starts with
// prefix and comes after after (a cursor: the last key of the previous
// page; "" starts at the prefix), and whether more follow. Values are
// left out with keysOnly; with them, a page also ends once its values
// reach maxBytes (0: no bound), so a page of large values is not copied
// whole under the state's lock.
func (s *State) KVList(prefix, after string, limit, maxBytes int, keysOnly bool) (out []KVEntry, more bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	from := max(prefix, after)
	size := 0
	s.data.kvKeys.AscendGreaterOrEqual(from, func(k string) bool {
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		if k == after {
			return true
		}
		v := s.data.kv[k]
		if len(out) == limit || (!keysOnly && maxBytes > 0 && len(out) > 0 && size+len(v) > maxBytes) {
			more = true
			return false
		}
		e := KVEntry{Key: k}
		if !keysOnly {
			e.Value = append([]byte(nil), v...)
			size += len(v)
		}
		out = append(out, e)
		return true
	})
	return out, more
}

func (s *State) snapshotData(snap *raftpb.Snapshot) {
	for _, k := range sortedKeys(s.data.secrets) {
		sec := s.data.secrets[k]
		snap.Secrets = append(snap.Secrets, &raftpb.SetSecret{Name: sec.Name, Sealed: sec.Sealed, AtMs: sec.SetAtMS, By: sec.SetBy})
	}
	s.data.kvKeys.Ascend(func(k string) bool {
		snap.Kv = append(snap.Kv, &raftpb.KVPut{Key: k, Value: s.data.kv[k]})
		return true
	})
	s.snapshotSkills(snap)
	s.snapshotJournal(snap)
	for _, id := range sortedKeys(s.data.hooks) {
		snap.Hooks = append(snap.Hooks, s.data.hooks[id])
	}
}

func (s *State) restoreData(snap *raftpb.Snapshot) {
	s.data = newDataState()
	for _, sec := range snap.Secrets {
		s.data.secrets[sec.Name] = &Secret{Name: sec.Name, Sealed: sec.Sealed, SetAtMS: sec.AtMs, SetBy: sec.By}
	}
	for _, e := range snap.Kv {
		s.data.kv[e.Key] = e.Value
		s.data.kvKeys.ReplaceOrInsert(e.Key)
	}
	s.restoreSkills(snap)
	s.restoreJournal(snap)
	for _, h := range snap.Hooks {
		s.data.hooks[h.Id] = h
	}
}
