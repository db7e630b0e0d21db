package consensus

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/internal/testdisk"
)

func smallDisk(t *testing.T, size int) string { return testdisk.Small(t, size) }

func freeBytes(t *testing.T, dir string) int64 { return testdisk.Free(t, dir) }

func tmpSnapshotDirs(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, snapshotsSubdir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSnapshotSuffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func testConf() raft.Configuration {
	return raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "n1:1"}}}
}

// fillSnapshot writes into a new snapshot until the disk refuses it, as a
// follower's install does when the leader's snapshot does not fit.
func fillSnapshot(t *testing.T, s raft.SnapshotStore, index uint64) raft.SnapshotSink {
	t.Helper()
	_, trans := raft.NewInmemTransport("n1:1")
	sink, err := s.Create(raft.SnapshotVersionMax, index, 1, testConf(), 1, trans)
	if err != nil {
		t.Fatalf("create snapshot: %v", err)
	}
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for i := 0; ; i++ {
		if _, err := sink.Write(chunk); err != nil {
			break
		}
		if i > 1000 {
			t.Fatal("a 64 MiB snapshot fitted on a small disk: the premise of this test is gone")
		}
	}
	return sink
}

// A snapshot write that fills the disk must take what it wrote with it
// when it is cancelled; raft's FileSnapshotStore leaves the partial
// snapshot behind (its Cancel returns the write error first), so a
// follower that is sent snapshots never frees its disk again.
func TestCancelledSnapshotFreesTheDisk(t *testing.T) {
	hl := hclog.NewNullLogger()

	// The premise, on a disk of its own (its leaked file holds the space
	// until the garbage collector closes it): raft's own store leaves the
	// partial snapshot.
	rawDir := smallDisk(t, 1<<20)
	raw, err := raft.NewFileSnapshotStoreWithLogger(rawDir, snapshotsRetained, hl)
	if err != nil {
		t.Fatal(err)
	}
	sink := fillSnapshot(t, raw, 10)
	_ = sink.Cancel()
	if left := tmpSnapshotDirs(t, rawDir); len(left) != 1 {
		t.Fatalf("raft's FileSnapshotStore left %v after a failed write; this test assumes it leaves one", left)
	}

	dir := smallDisk(t, 1<<20)
	before := freeBytes(t, dir)

	s, err := openSnapshots(dir, hl, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ { // again and again, as raft retries an install
		sink := fillSnapshot(t, s, 10*i)
		if err := sink.Cancel(); err != nil {
			t.Fatalf("Cancel after a failed write: %v (it has removed all it wrote)", err)
		}
		if left := tmpSnapshotDirs(t, dir); len(left) != 0 {
			t.Fatalf("attempt %d left %v", i, left)
		}
		if free := freeBytes(t, dir); free < before-64<<10 {
			t.Fatalf("attempt %d: %d bytes free, %d before it", i, free, before)
		}
	}

	// The disk is usable: a snapshot that fits completes.
	_, trans := raft.NewInmemTransport("n1:1")
	ok, err := s.Create(raft.SnapshotVersionMax, 100, 2, testConf(), 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("y"), 100<<10)
	if _, err := ok.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := ok.Close(); err != nil {
		t.Fatal(err)
	}
	metas, err := s.List()
	if err != nil || len(metas) != 1 || metas[0].Index != 100 || metas[0].Size != int64(len(want)) {
		t.Fatalf("List = %v, %v; want the one snapshot at index 100", metas, err)
	}
	// raft's store reads it back (its CRC check included).
	meta, rc, err := s.Open(ok.ID())
	if err != nil {
		t.Fatalf("open the snapshot written: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, want) || meta.Term != 2 || meta.ConfigurationIndex != 1 || len(meta.Configuration.Servers) != 1 {
		t.Fatalf("read back %d bytes, meta %+v, err %v", len(got), meta, err)
	}
}

// A snapshot whose Close fails (its data no longer fits when flushed)
// leaves nothing either.
func TestFailedSnapshotCloseFreesTheDisk(t *testing.T) {
	dir := smallDisk(t, 512<<10)
	s, err := openSnapshots(dir, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("n1:1")
	sink, err := s.Create(raft.SnapshotVersionMax, 7, 1, testConf(), 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	// Less than the buffered writer holds per flush goes in without an
	// error; the disk refuses it only at Close's flush. Fill the disk
	// from outside first.
	testdisk.Fill(t, dir, 0)
	if _, err := sink.Write(bytes.Repeat([]byte("y"), 8<<10)); err != nil {
		t.Logf("write: %v", err)
	}
	if err := sink.Close(); err == nil {
		t.Fatal("Close on a full disk reported no error")
	}
	if left := tmpSnapshotDirs(t, dir); len(left) != 0 {
		t.Fatalf("a failed Close left %v", left)
	}
}

// What an earlier process left (it crashed mid-snapshot, or ran a raft
// version that leaked them) goes when the store opens; complete snapshots
// stay.
func TestUnfinishedSnapshotsRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	hl := hclog.NewNullLogger()
	s, err := openSnapshots(dir, hl, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("n1:1")
	sink, err := s.Create(raft.SnapshotVersionMax, 5, 1, testConf(), 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"1-9-100.tmp", "2-12-200.tmp"} {
		p := filepath.Join(dir, snapshotsSubdir, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "state.bin"), make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A file named like one is not a snapshot directory: left alone.
	stray := filepath.Join(dir, snapshotsSubdir, "notes.tmp")
	if err := os.WriteFile(stray, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	n, freed, err := removeTmpSnapshots(filepath.Join(dir, snapshotsSubdir))
	if err != nil || n != 2 || freed != 2*4096 {
		t.Fatalf("removeTmpSnapshots = %d, %d, %v; want 2, 8192, nil", n, freed, err)
	}
	for _, name := range []string{"1-9-100.tmp", "2-12-200.tmp"} { // again, through Open
		if err := os.MkdirAll(filepath.Join(dir, snapshotsSubdir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := openSnapshots(dir, hl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if left := tmpSnapshotDirs(t, dir); len(left) != 1 || left[0] != "notes.tmp" {
		t.Fatalf("after open: %v; want only the stray file", left)
	}
	metas, err := s2.List()
	if err != nil || len(metas) != 1 || metas[0].Index != 5 {
		t.Fatalf("List = %v, %v; want the complete snapshot at index 5", metas, err)
	}
}

// A Create that fails (the disk is full) removes the directory it made,
// and only that one: a snapshot being written at the time stays.
func TestFailedCreateSparesOpenSnapshots(t *testing.T) {
	dir := smallDisk(t, 256<<10)
	s, err := openSnapshots(dir, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("n1:1")
	busy, err := s.Create(raft.SnapshotVersionMax, 3, 1, testConf(), 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	testdisk.Fill(t, dir, 0)
	if _, err := s.Create(raft.SnapshotVersionMax, 4, 1, testConf(), 1, trans); err == nil {
		t.Fatal("Create on a full disk reported no error")
	}
	left := tmpSnapshotDirs(t, dir)
	if len(left) != 1 || !strings.HasPrefix(left[0], "1-3-") {
		t.Fatalf("after a failed Create: %v; want only the open snapshot (1-3-…)", left)
	}
	_ = busy.Cancel()
	if left := tmpSnapshotDirs(t, dir); len(left) != 0 {
		t.Fatalf("after Cancel: %v", left)
	}
}
