package consensus

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Backups: a consistent copy of the state taken through raft, read back
// without building a state, and planted into a fresh raft directory as
// the starting point of a new cluster. See DESIGN.md ("Backups").

// ConfServer is one server of a raft configuration.
type ConfServer struct {
	ID      string
	Address string
	Voter   bool
}

func confServers(c raft.Configuration) []ConfServer {
	out := make([]ConfServer, 0, len(c.Servers))
	for _, s := range c.Servers {
		out = append(out, ConfServer{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out
}

// SnapshotMeta is where a snapshot taken with TakeSnapshot stands.
type SnapshotMeta struct {
	Index   uint64 // the last raft index the state includes
	Term    uint64 // that entry's term
	Size    int64  // bytes of the snapshot stream
	Servers []ConfServer
}

// TakeSnapshot has raft snapshot the FSM now (as of its last applied
// entry, on whatever node this is) and opens the result: a stream in the
// FSM's snapshot format, read from the snapshot store on disk, never held
// in memory. The caller closes it. Call it after a linearizable read
// barrier to include every write acknowledged before.
func (s *Store) TakeSnapshot() (SnapshotMeta, io.ReadCloser, error) {
	f := s.raft.Snapshot()
	if err := f.Error(); err != nil {
		return SnapshotMeta{}, nil, fmt.Errorf("take raft snapshot: %w", err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		return SnapshotMeta{}, nil, fmt.Errorf("open raft snapshot: %w", err)
	}
	return SnapshotMeta{Index: meta.Index, Term: meta.Term, Size: meta.Size, Servers: confServers(meta.Configuration)}, rc, nil
}

// ErrDamagedSnapshot marks a snapshot stream that does not decode.
var ErrDamagedSnapshot = errors.New("damaged state snapshot")

// SnapshotContents is what a snapshot stream holds, as ScanSnapshot
// counts it.
type SnapshotContents struct {
	AppliedIndex  uint64
	Jobs          uint64
	Arrays        uint64
	JobsByPhase   map[Phase]uint64
	Members       []Member // sorted by kind, id
	Secrets       int
	PolicyVersion uint64
	// Skills counts the installed skills, Hooks the hook bindings.
	Skills, Hooks int
	// KVKeys and KVBytes count the key-value store's keys and their
	// values' bytes.
	KVKeys  int
	KVBytes int64
	// Audit is the audit journal the state carries.
	Audit JournalSummary
	// Blobs is every blob the state names (modules, payloads, artifacts,
	// skill packages),
	// sorted, each once.
	Blobs []string
}

// JournalSummary describes an audit journal: its retained records, the
// head (seq and hash of the last record, or the folded base when none is
// retained), and where the chain breaks if it does (BadSeq 0 and Problem
// empty when it verifies from its base).
type JournalSummary struct {
	Records  int
	BaseSeq  uint64
	HeadSeq  uint64
	HeadHash string
	BadSeq   uint64
	Problem  string
}

// ScanSnapshot reads a snapshot stream (the format Persist writes) to its
// end, decoding every record as Restore would, without building a state:
// it needs memory for one record and the set of blob names. A stream
// Restore would refuse, ScanSnapshot refuses: with an error wrapping
// ErrDamagedSnapshot, or the reader's own error.
func ScanSnapshot(r io.Reader) (SnapshotContents, error) {
	c, err := scanSnapshot(r)
	if err != nil && !errors.Is(err, ErrDamagedSnapshot) {
		var rerr readError
		if errors.As(err, &rerr) {
			return c, rerr.err
		}
		err = fmt.Errorf("%w: %w", ErrDamagedSnapshot, err)
	}
	return c, err
}

// readError carries a failure of the underlying reader through the
// decoder, so it is not mistaken for damage.
type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }
func (e readError) Unwrap() error { return e.err }

type errReader struct{ r io.Reader }

func (e errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = readError{err}
	}
	return n, err
}

func scanSnapshot(r io.Reader) (SnapshotContents, error) {
	var c SnapshotContents
	r = errReader{r}
	br := bufio.NewReaderSize(r, 256<<10)
	head, err := br.Peek(len(snapshotMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return c, err
	}
	if !bytes.Equal(head, snapshotMagic) {
		return c, errors.New("the state is not a version-2 palyra state snapshot (no magic)")
	}
	_, _ = br.Discard(len(snapshotMagic))
	opts := protodelim.UnmarshalOptions{MaxSize: 256 << 20}
	var hdr raftpb.Snapshot
	if err := opts.UnmarshalFrom(br, &hdr); err != nil {
		return c, fmt.Errorf("decode state header: %w", err)
	}
	if hdr.Version > snapshotVersion {
		return c, fmt.Errorf("state version %d is newer than this palyra understands (%d): upgrade palyra", hdr.Version, snapshotVersion)
	}
	c.AppliedIndex, c.Jobs, c.Arrays = hdr.AppliedIndex, hdr.JobCount, hdr.ArrayCount
	c.Secrets = len(hdr.Secrets)
	if hdr.Policy != nil {
		c.PolicyVersion = hdr.Policy.Version
	}
	for _, m := range hdr.Members {
		c.Members = append(c.Members, memberFromPB(m))
	}
	sort.Slice(c.Members, func(i, j int) bool {
		if c.Members[i].Kind != c.Members[j].Kind {
			return c.Members[i].Kind < c.Members[j].Kind
		}
		return c.Members[i].ID < c.Members[j].ID
	})
	c.Hooks = len(hdr.Hooks)
	for _, kv := range hdr.Kv {
		c.KVKeys++
		c.KVBytes += int64(len(kv.Value))
	}
	j := journal{records: hdr.Journal, baseSeq: hdr.JournalBaseSeq, baseHash: hdr.JournalBaseSha256}
	c.Audit.BaseSeq = j.baseSeq
	c.Audit.HeadSeq, c.Audit.HeadHash = j.head()
	c.Audit.Records, c.Audit.BadSeq, c.Audit.Problem = j.verify()
	c.JobsByPhase = map[Phase]uint64{}
	blobs := map[string]struct{}{}
	add := func(h string) { blobs[h] = struct{}{} }
	for _, sk := range hdr.Skills { // installed skills: the package and the modules
		c.Skills++
		add(sk.PackageSha256)
		for _, t := range sk.Tools {
			add(t.ModuleSha256)
		}
	}
	for i := uint64(0); i < hdr.JobCount; i++ {
		var rec raftpb.JobRecord
		if err := opts.UnmarshalFrom(br, &rec); err != nil {
			return c, fmt.Errorf("decode state job %d of %d: %w", i+1, hdr.JobCount, err)
		}
		j := jobFromRecord(&rec)
		c.JobsByPhase[j.Phase]++
		blobsOf(&j, add)
	}
	for i := uint64(0); i < hdr.ArrayCount; i++ {
		var rec raftpb.ArrayRecord
		if err := opts.UnmarshalFrom(br, &rec); err != nil {
			return c, fmt.Errorf("decode state array %d of %d: %w", i+1, hdr.ArrayCount, err)
		}
		if rec.Template == nil {
			return c, fmt.Errorf("state array %d of %d has no template", i+1, hdr.ArrayCount)
		}
		if h := rec.Template.ModuleSha256; h != "" {
			add(h)
		}
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		if err != nil {
			return c, fmt.Errorf("read state: %w", err)
		}
		return c, fmt.Errorf("the state has data after its %d jobs and %d arrays", hdr.JobCount, hdr.ArrayCount)
	}
	c.Blobs = make([]string, 0, len(blobs))
	for h := range blobs {
		c.Blobs = append(c.Blobs, h)
	}
	sort.Strings(c.Blobs)
	return c, nil
}

// SeedConfig says where and as whom SeedSnapshot plants a state.
type SeedConfig struct {
	Dir     string // the raft directory to create (must hold no raft state)
	NodeID  string // the only voter of the new cluster
	Address string // its advertised address
	// Index and Term are the raft position the state reflects; the new
	// cluster's log continues after them, so job order and commit
	// indexes carry on.
	Index, Term uint64
	// After, if set, returns commands to append to the log behind the
	// snapshot. They are committed, like any entry, when the new node
	// first leads, and so reach every later member.
	After  func(SnapshotContents) []*raftpb.Command
	Logger *slog.Logger
}

// SeedSnapshot makes cfg.Dir the raft directory of a new single-voter
// cluster whose state is the snapshot stream r: a raft snapshot at
// (Index, Term) with the configuration {NodeID: voter}, the current term
// set to Term (so the new leader's entries never carry a lower term than
// those before them), and After's commands in the log. The stream is
// checked record by record (ScanSnapshot) as it is written; on error the
// directory is left without raft state.
func SeedSnapshot(cfg SeedConfig, r io.Reader) (SnapshotContents, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NodeID == "" || cfg.Address == "" || cfg.Index == 0 || cfg.Term == 0 {
		return SnapshotContents{}, errors.New("consensus: seed needs a node id, an address and a non-zero index and term")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return SnapshotContents{}, fmt.Errorf("create raft dir: %w", err)
	}
	hl := newHCLogger(cfg.Logger.With("component", "raft"))
	bolt, err := openBolt(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		return SnapshotContents{}, fmt.Errorf("open raft log: %w", err)
	}
	defer bolt.Close()
	snaps, err := openSnapshots(cfg.Dir, hl, cfg.Logger)
	if err != nil {
		return SnapshotContents{}, fmt.Errorf("open snapshot store: %w", err)
	}
	if has, err := raft.HasExistingState(bolt, bolt, snaps); err != nil || has {
		return SnapshotContents{}, fmt.Errorf("raft dir %s already holds raft state (%v); seed only an empty one", cfg.Dir, err)
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.Address))
	defer trans.Close()
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(cfg.Address)}}}
	sink, err := snaps.Create(raft.SnapshotVersionMax, cfg.Index, cfg.Term, conf, cfg.Index, trans)
	if err != nil {
		return SnapshotContents{}, fmt.Errorf("create raft snapshot: %w", err)
	}
	contents, err := ScanSnapshot(io.TeeReader(r, sink))
	if err != nil {
		_ = sink.Cancel()
		return contents, err
	}
	if err := sink.Close(); err != nil {
		return contents, fmt.Errorf("write raft snapshot: %w", err)
	}
	// raft keeps its current term under this key; a new store has none,
	// and a leader elected at term 1 would append entries of a lower term
	// than the snapshot's: a later election could then prefer a node
	// holding only the snapshot and drop them.
	if err := bolt.SetUint64([]byte("CurrentTerm"), cfg.Term); err != nil {
		return contents, fmt.Errorf("set raft term: %w", err)
	}
	if cfg.After != nil {
		if err := appendCommands(bolt, cfg.Index, cfg.Term, cfg.After(contents)); err != nil {
			return contents, err
		}
	}
	return contents, nil
}

// appendCommands stores cmds as log entries after index, in term.
func appendCommands(bolt *raftboltdb.BoltStore, index, term uint64, cmds []*raftpb.Command) error {
	if len(cmds) == 0 {
		return nil
	}
	logs := make([]*raft.Log, 0, len(cmds))
	for i, cmd := range cmds {
		data, err := proto.Marshal(cmd)
		if err != nil {
			return fmt.Errorf("encode command: %w", err)
		}
		logs = append(logs, &raft.Log{Index: index + 1 + uint64(i), Term: term, Type: raft.LogCommand, Data: data})
	}
	if err := bolt.StoreLogs(logs); err != nil {
		return fmt.Errorf("append to raft log: %w", err)
	}
	return nil
}
