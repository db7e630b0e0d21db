package consensus

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// snapshotVersion is written into every snapshot; Restore refuses newer
// ones. Version 1 was one Snapshot message holding every job; version 2
// streams (see snapshotMagic).
const snapshotVersion = 2

// snapshotMagic starts a version-2 snapshot. After it come length-delimited
// messages: a Snapshot header (no jobs), header.job_count JobRecords in
// acceptance order, then header.array_count ArrayRecords. Neither writing
// nor reading holds the whole snapshot in memory at once.
var snapshotMagic = []byte("PALYRA-SNAPSHOT\x00\x02")

// Snapshot implements raft.FSM. It runs between applies, so it only takes
// what Persist needs to write the state as of now: the job tree is cloned
// copy-on-write in O(1) (jobs are immutable values), the small planes are
// encoded here.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	s := f.state
	s.mu.RLock()
	defer s.mu.RUnlock()
	applied := f.appliedBytes.Load() // raft runs Snapshot on its FSM goroutine: nothing applies meanwhile
	hdr := &raftpb.Snapshot{Version: snapshotVersion, StaleResults: s.staleResults, AppliedIndex: s.applied,
		JobCount: uint64(s.idx.order.Len()), ArrayCount: uint64(len(s.arrays)), RetentionMs: s.retentionMS,
		PrunedBeforeMs: s.prunedBefore, ClockMs: s.clockMS}
	s.snapshotIdentity(hdr)
	s.snapshotData(hdr)
	arrays := make([]*raftpb.ArrayRecord, 0, len(s.arrays))
	for _, id := range sortedKeys(s.arrays) {
		a := s.arrays[id]
		arrays = append(arrays, &raftpb.ArrayRecord{Template: jobToRecord(&a.Template), Size: a.Size})
	}
	return &fsmSnapshot{hdr: hdr, jobs: s.idx.order.Clone(), arrays: arrays, fsm: f, applied: applied}, nil
}

type fsmSnapshot struct {
	hdr    *raftpb.Snapshot
	jobs   *btree.BTreeG[*Job]
	arrays []*raftpb.ArrayRecord
	// once persisted, fsm.atSnapshot becomes applied (the bytes applied
	// when the snapshot was taken): a snapshot that fails counts nothing.
	fsm     *FSM
	applied uint64
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	err := s.write(sink)
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if s.fsm != nil {
		s.fsm.atSnapshot.Store(max(s.fsm.atSnapshot.Load(), s.applied))
	}
	return nil
}

func (s *fsmSnapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	if _, err := bw.Write(snapshotMagic); err != nil {
		return err
	}
	opts := protodelim.MarshalOptions{MarshalOptions: proto.MarshalOptions{Deterministic: true}}
	if _, err := opts.MarshalTo(bw, s.hdr); err != nil {
		return err
	}
	var werr error
	s.jobs.Ascend(func(j *Job) bool {
		_, werr = opts.MarshalTo(bw, jobToRecord(j))
		return werr == nil
	})
	if werr != nil {
		return werr
	}
	for _, a := range s.arrays {
		if _, err := opts.MarshalTo(bw, a); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func (s *fsmSnapshot) Release() {}

// Restore implements raft.FSM: it replaces the whole state, including the
// applied index, so a restored replica answers read-index requests with
// the index its state reflects.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.atSnapshot.Store(f.appliedBytes.Load()) // the log before it is behind us
	br := bufio.NewReaderSize(rc, 256<<10)
	head, err := br.Peek(len(snapshotMagic))
	var ns *State
	if err == nil && bytes.Equal(head, snapshotMagic) {
		_, _ = br.Discard(len(snapshotMagic))
		ns, err = restoreV2(br)
	} else {
		ns, err = restoreV1(br)
	}
	if err != nil {
		return err
	}
	s := f.state
	s.mu.Lock()
	s.jobs, s.staleResults, s.id, s.idempotency, s.data = ns.jobs, ns.staleResults, ns.id, ns.idempotency, ns.data
	s.idx, s.arrays, s.retentionMS, s.applied = ns.idx, ns.arrays, ns.retentionMS, ns.applied
	s.prunedBefore, s.clockMS, s.journal = ns.prunedBefore, ns.clockMS, ns.journal
	close(s.changed)
	s.changed = make(chan struct{})
	for t, ch := range s.topics { // everything may have changed
		close(ch)
		delete(s.topics, t)
	}
	s.mu.Unlock()
	return nil
}

func restoreV2(r *bufio.Reader) (*State, error) {
	opts := protodelim.UnmarshalOptions{MaxSize: 256 << 20}
	var hdr raftpb.Snapshot
	if err := opts.UnmarshalFrom(r, &hdr); err != nil {
		return nil, fmt.Errorf("decode snapshot header: %w", err)
	}
	if hdr.Version > snapshotVersion {
		return nil, fmt.Errorf("snapshot version %d is newer than this node understands (%d): upgrade the node", hdr.Version, snapshotVersion)
	}
	ns := newState()
	ns.staleResults, ns.applied, ns.retentionMS = hdr.StaleResults, hdr.AppliedIndex, hdr.RetentionMs
	ns.prunedBefore, ns.clockMS = hdr.PrunedBeforeMs, hdr.ClockMs
	ns.restoreIdentity(&hdr)
	ns.restoreData(&hdr)
	jobs := make([]*Job, 0, hdr.JobCount)
	for i := uint64(0); i < hdr.JobCount; i++ {
		var rec raftpb.JobRecord
		if err := opts.UnmarshalFrom(r, &rec); err != nil {
			return nil, fmt.Errorf("decode snapshot job %d of %d: %w", i+1, hdr.JobCount, err)
		}
		j := jobFromRecord(&rec)
		jobs = append(jobs, &j)
	}
	for i := uint64(0); i < hdr.ArrayCount; i++ {
		var rec raftpb.ArrayRecord
		if err := opts.UnmarshalFrom(r, &rec); err != nil {
			return nil, fmt.Errorf("decode snapshot array %d of %d: %w", i+1, hdr.ArrayCount, err)
		}
		t := jobFromRecord(rec.Template)
		a := &Array{Template: t, Size: rec.Size}
		ns.arrays[t.ID] = a
		ns.idx.arrays.ReplaceOrInsert(a)
		if t.ModuleHash != "" {
			ns.idx.blobRefs[t.ModuleHash]++
		}
		if t.IdempotencyKey != "" {
			ns.idempotency[t.IdempotencyKey] = t.ID
		}
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("decode snapshot: trailing data after %d jobs and %d arrays", hdr.JobCount, hdr.ArrayCount)
	}
	for _, j := range jobs {
		ns.put(nil, j)
		if j.IdempotencyKey != "" {
			ns.idempotency[j.IdempotencyKey] = j.ID
		}
	}
	return ns, nil
}

// restoreV1 reads a snapshot written before snapshots streamed.
func restoreV1(r io.Reader) (*State, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	var snap raftpb.Snapshot
	if err := proto.Unmarshal(data, &snap); err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	if snap.Version > 1 {
		return nil, fmt.Errorf("snapshot version %d without its header: the file is damaged", snap.Version)
	}
	ns := newState()
	for _, r := range snap.Jobs {
		j := jobFromRecord(r)
		ns.put(nil, &j)
		if j.IdempotencyKey != "" {
			ns.idempotency[j.IdempotencyKey] = j.ID
		}
	}
	ns.staleResults = snap.StaleResults
	ns.restoreIdentity(&snap)
	ns.restoreData(&snap)
	return ns, nil
}
