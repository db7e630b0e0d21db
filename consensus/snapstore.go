package consensus

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Snapshot files.
//
// raft's FileSnapshotStore writes a snapshot into "snapshots/<id>.tmp" and
// renames it when done. When a write fails (ENOSPC, say) it leaves both the
// directory and the open state file behind: its Cancel returns the
// buffered writer's error before it closes the file or removes anything
// (hashicorp/raft#714, open upstream). On a follower that is sent
// snapshots (it is behind the leader's log) each failed install then keeps
// a partial snapshot, as large as the disk allowed, so the disk stays full
// after the operator frees space, the next install fails the same way, and
// the node never catches up. A crash mid-snapshot leaves one for ever too.
//
// So this package writes snapshots itself, in the store's own layout, and
// leaves listing, opening (with its CRC check) and reaping to the store: a
// snapshot that does not complete closes its file and takes its directory
// with it, and leftover ones go when the store opens (the bolt lock is held
// by then, so no other process writes into it). A snapshot being written
// while the node crashes is the only one a later open removes.

// snapshotsSubdir is where raft's FileSnapshotStore keeps its snapshots.
const snapshotsSubdir = "snapshots"

// tmpSnapshotSuffix marks a snapshot being written (raft's own suffix).
const tmpSnapshotSuffix = ".tmp"

// snapshotsRetained is how many complete snapshots a store keeps: the
// newest, and one to fall back on. Each is a full copy of the state, and
// an install needs room for one more while the old ones are still there.
const snapshotsRetained = 2

// openSnapshots opens the snapshot store under dir after removing what
// interrupted snapshots left there; lg (may be nil) hears what it removed.
func openSnapshots(dir string, hl hclog.Logger, lg *slog.Logger) (raft.SnapshotStore, error) {
	fs, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, hl)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, snapshotsSubdir)
	removed, freed, err := removeTmpSnapshots(root)
	if err != nil {
		return nil, fmt.Errorf("remove unfinished snapshots in %s: %w", root, err)
	}
	if removed > 0 && lg != nil {
		lg.Warn("removed unfinished snapshots (an earlier snapshot write failed or the node stopped mid-write)",
			"count", removed, "freed_bytes", freed, "dir", root)
	}
	return &cleanSnapshots{FileSnapshotStore: fs, root: root}, nil
}

// removeTmpSnapshots removes every "<id>.tmp" directory under root and
// says how many it removed and how many bytes they held.
func removeTmpSnapshots(root string) (n int, freed int64, err error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if !e.IsDir() || !strings.HasSuffix(e.Name(), tmpSnapshotSuffix) {
			continue
		}
		freed += dirSize(p)
		if err := os.RemoveAll(p); err != nil {
			return n, freed, err
		}
		n++
	}
	return n, freed, nil
}

// dirSize is the bytes of the regular files directly in dir (a snapshot
// directory holds only meta.json and state.bin); errors count as 0.
func dirSize(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}

// cleanSnapshots is a FileSnapshotStore whose unfinished snapshots do not
// outlive their sink. It writes snapshots itself, in the store's own
// layout (meta.json as the store writes it, state.bin with its CRC-64), so
// that a failed write closes its file and removes its directory; listing,
// opening (with the CRC check) and reaping stay the store's.
type cleanSnapshots struct {
	*raft.FileSnapshotStore
	root string
}

// snapshotMetaFile and snapshotStateFile are the store's file names.
const (
	snapshotMetaFile  = "meta.json"
	snapshotStateFile = "state.bin"
)

// fileMeta is meta.json: what raft's FileSnapshotStore reads back.
type fileMeta struct {
	raft.SnapshotMeta
	CRC []byte
}

// Create starts a snapshot whose directory goes if it does not complete.
func (s *cleanSnapshots) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version < raft.SnapshotVersionMin || version > raft.SnapshotVersionMax {
		return nil, fmt.Errorf("snapshot version %d is not supported (this node reads %d to %d)",
			version, raft.SnapshotVersionMin, raft.SnapshotVersionMax)
	}
	// The store's naming: term-index-milliseconds.
	id := fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
	k := &cleanSink{store: s, tmp: filepath.Join(s.root, id+tmpSnapshotSuffix), meta: fileMeta{
		SnapshotMeta: raft.SnapshotMeta{Version: version, ID: id, Index: index, Term: term,
			Configuration: configuration, ConfigurationIndex: configurationIndex},
	}}
	fail := func(err error) (raft.SnapshotSink, error) {
		k.abandon()
		return nil, err
	}
	if err := os.MkdirAll(k.tmp, 0o755); err != nil {
		return fail(fmt.Errorf("create snapshot directory: %w", err))
	}
	if err := k.writeMeta(); err != nil {
		return fail(err)
	}
	f, err := os.Create(filepath.Join(k.tmp, snapshotStateFile))
	if err != nil {
		return fail(fmt.Errorf("create snapshot state file: %w", err))
	}
	k.file = f
	k.crc = crc64.New(crc64.MakeTable(crc64.ECMA))
	k.buf = bufio.NewWriterSize(io.MultiWriter(f, k.crc), 64<<10)
	return k, nil
}

// cleanSink writes one snapshot into "<id>.tmp" and renames it to "<id>"
// when it completes; whenever it does not, its file is closed and its
// directory removed.
type cleanSink struct {
	store *cleanSnapshots
	tmp   string
	meta  fileMeta
	file  *os.File
	crc   interface {
		io.Writer
		Sum([]byte) []byte
	}
	buf  *bufio.Writer
	done bool
}

// ID is the snapshot's id, for Open once it completes.
func (k *cleanSink) ID() string { return k.meta.ID }

// Write appends to the snapshot's state.
func (k *cleanSink) Write(p []byte) (int, error) {
	if k.done {
		return 0, errors.New("snapshot already closed")
	}
	return k.buf.Write(p)
}

// Close completes the snapshot: data synced, meta.json written, the
// directory renamed into place and synced, old snapshots reaped. If any
// step before the rename fails, nothing of it is left.
func (k *cleanSink) Close() error {
	if k.done {
		return nil
	}
	if err := k.finish(); err != nil {
		k.abandon()
		return err
	}
	k.done = true
	final := strings.TrimSuffix(k.tmp, tmpSnapshotSuffix)
	if err := os.Rename(k.tmp, final); err != nil {
		_ = os.RemoveAll(k.tmp)
		return fmt.Errorf("move snapshot into place: %w", err)
	}
	if err := syncDir(k.store.root); err != nil {
		return fmt.Errorf("sync snapshot directory: %w", err)
	}
	return k.store.ReapSnapshots()
}

// finish flushes and syncs the state file, writes the final meta.json
// and syncs the directory holding them.
func (k *cleanSink) finish() error {
	if err := k.buf.Flush(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := k.file.Sync(); err != nil {
		return fmt.Errorf("sync snapshot: %w", err)
	}
	st, err := k.file.Stat()
	if err != nil {
		return err
	}
	if err := k.file.Close(); err != nil {
		return fmt.Errorf("close snapshot: %w", err)
	}
	k.file = nil
	k.meta.Size = st.Size()
	k.meta.CRC = k.crc.Sum(nil)
	if err := k.writeMeta(); err != nil {
		return err
	}
	// The directory's own entries (state.bin, meta.json) must be durable
	// before it is renamed into place: a power cut after the rename must
	// not leave a snapshot directory without its files.
	if err := syncDir(k.tmp); err != nil {
		return fmt.Errorf("sync snapshot: %w", err)
	}
	return nil
}

// Cancel abandons the snapshot: its file is closed and its directory
// removed, whatever state a failed write left them in.
func (k *cleanSink) Cancel() error {
	if k.done {
		return nil
	}
	return k.abandon()
}

// abandon closes the state file (if open) and removes the directory.
func (k *cleanSink) abandon() error {
	k.done = true
	if k.file != nil {
		_ = k.file.Close() // a write error already said what went wrong
		k.file = nil
	}
	return os.RemoveAll(k.tmp)
}

// writeMeta writes meta.json, synced.
func (k *cleanSink) writeMeta() error {
	b, err := json.Marshal(&k.meta)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(k.tmp, snapshotMetaFile))
	if err != nil {
		return fmt.Errorf("write snapshot meta: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write snapshot meta: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync snapshot meta: %w", err)
	}
	return f.Close()
}

// syncDir fsyncs a directory, making a rename in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
