package consensus

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// steady is fast's timers made long enough that a loaded machine does
// not depose leaders mid-test.
func steady(c *raft.Config) {
	fast(c)
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
}

func hashN(i int) string { return strings.Repeat(fmt.Sprintf("%x", i%16), 64) }

// populate applies a little of everything: jobs naming blobs (module,
// input, output, artifact), an array, members, a secret, a policy.
func populate(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	apply := func(cmd *raftpb.Command) {
		t.Helper()
		if _, err := s.Apply(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []*raftpb.Member{{Kind: "node", Id: "n-old1"}, {Kind: "node", Id: "n-old2"}, {Kind: "device", Id: "d-op", Operator: true}} {
		apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: m}}})
	}
	for i := 0; i < 10; i++ {
		apply(&raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: &raftpb.JobRecord{
			Id: fmt.Sprintf("j%d", i), Kind: "wasm", ModuleSha256: hashN(1), InputSha256: hashN(2 + i%2), InputSize: 5000}}}})
	}
	apply(assign("j0", 1, "n-old1"))
	apply(&raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: "j0", Attempt: 1, NodeId: "n-old1", Ok: true,
		StdoutSha256: hashN(4), StdoutSize: 9000, Artifacts: []*raftpb.ArtifactRef{{Name: "a.png", Sha256: hashN(5), Size: 3}}}}})
	apply(assign("j1", 1, "n-old2"))
	apply(&raftpb.Command{Cmd: &raftpb.Command_SubmitArray{SubmitArray: &raftpb.SubmitArray{
		Template: &raftpb.JobRecord{Id: "arr", Kind: "wasm", ModuleSha256: hashN(6)},
		Tasks:    []*raftpb.ArrayTask{{Input: []byte("a")}, {Input: []byte("b")}, {InputSha256: hashN(7), InputSize: 9999}}}}})
	apply(&raftpb.Command{Cmd: &raftpb.Command_SetSecret{SetSecret: &raftpb.SetSecret{Name: "tok", Sealed: []byte("sealed")}}})
	apply(&raftpb.Command{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{Source: []byte("permit(principal,action,resource);")}}})
}

func takeSnapshot(t *testing.T, s *Store) (SnapshotMeta, []byte) {
	t.Helper()
	meta, rc, err := s.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != meta.Size {
		t.Fatalf("snapshot of %d bytes, meta says %d", len(data), meta.Size)
	}
	return meta, data
}

// TakeSnapshot, ScanSnapshot and SeedSnapshot: the scan names exactly the
// blobs the state references, and a node started on a seeded directory
// holds the same state, continues the log after the snapshot's index,
// at a term no lower than its term, and commits the seed's commands.
func TestSnapshotScanAndSeed(t *testing.T) {
	s := openStore(t, t.TempDir(), "n-old1", true)
	defer s.Close()
	waitLeader(t, s)
	populate(t, s)
	for _, kv := range []*raftpb.KVPut{{Key: "a", Value: []byte("12345")}, {Key: "b", Value: []byte("678")}} {
		if _, err := s.Apply(context.Background(), &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: kv}}); err != nil {
			t.Fatal(err)
		}
	}
	meta, data := takeSnapshot(t, s)
	if meta.Index == 0 || meta.Term == 0 || len(meta.Servers) != 1 || meta.Servers[0].ID != "n-old1" || !meta.Servers[0].Voter {
		t.Fatalf("meta %+v", meta)
	}

	c, err := ScanSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	st := s.State()
	if c.Jobs != uint64(st.JobCount()) || c.Arrays != 1 || c.AppliedIndex != st.AppliedIndex() || c.Secrets != 1 || c.PolicyVersion != 1 {
		t.Fatalf("contents %+v; state has %d jobs, applied %d", c, st.JobCount(), st.AppliedIndex())
	}
	want := []string{hashN(1), hashN(2), hashN(3), hashN(4), hashN(5), hashN(6), hashN(7)}
	slices.Sort(want)
	if !slices.Equal(c.Blobs, want) {
		t.Fatalf("blobs %v, want %v", c.Blobs, want)
	}
	for _, h := range c.Blobs {
		if !st.BlobReferenced(h) {
			t.Fatalf("scan names %s, which the state does not reference", h)
		}
	}
	if len(c.Members) != 3 || c.Members[0].Kind != "device" || c.JobsByPhase[PhaseCompleted] != 1 || c.JobsByPhase[PhaseRunning] != 1 {
		t.Fatalf("contents %+v", c)
	}
	if c.KVKeys != 2 || c.KVBytes != 8 {
		t.Fatalf("key-value contents: %d keys, %d bytes; want 2 and 8", c.KVKeys, c.KVBytes)
	}
	seq, head := st.JournalHead()
	if c.Audit.Records == 0 || c.Audit.HeadSeq != seq || c.Audit.HeadHash != head || c.Audit.Problem != "" {
		t.Fatalf("audit in the scan: %d records, head %d %s, problem %q; the state's head is %d %s",
			c.Audit.Records, c.Audit.HeadSeq, c.Audit.HeadHash, c.Audit.Problem, seq, head)
	}

	// Every truncation of the stream is refused as damage; a failing
	// reader's error comes back as itself.
	for _, n := range []int{0, 10, len(data) / 2, len(data) - 1} {
		if _, err := ScanSnapshot(bytes.NewReader(data[:n])); !errors.Is(err, ErrDamagedSnapshot) {
			t.Fatalf("stream cut at %d/%d: %v", n, len(data), err)
		}
	}
	if _, err := ScanSnapshot(bytes.NewReader(append(bytes.Clone(data), 1))); !errors.Is(err, ErrDamagedSnapshot) {
		t.Fatalf("trailing data: %v", err)
	}
	for _, n := range []int{0, 20, len(data) - 1} {
		boom := errors.New("disk on fire")
		_, err := ScanSnapshot(io.MultiReader(bytes.NewReader(data[:n]), iotest.ErrReader(boom)))
		if !errors.Is(err, boom) || errors.Is(err, ErrDamagedSnapshot) {
			t.Fatalf("reader failing after %d bytes: %v", n, err)
		}
	}

	// A truncated stream leaves the directory seedable.
	dir := filepath.Join(t.TempDir(), "raft")
	l := newLayer(t)
	cfg := SeedConfig{Dir: dir, NodeID: "n-new", Address: l.Addr().String(), Index: meta.Index, Term: meta.Term,
		Logger: slog.New(slog.DiscardHandler)}
	if _, err := SeedSnapshot(cfg, bytes.NewReader(data[:len(data)-3])); err == nil {
		t.Fatal("seeding from a truncated stream succeeded")
	}
	cfg.After = func(c SnapshotContents) []*raftpb.Command {
		var out []*raftpb.Command
		for _, m := range c.Members {
			if m.Kind == "node" {
				out = append(out, &raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{Kind: m.Kind, Id: m.ID, By: "test"}}})
			}
		}
		return out
	}
	if _, err := SeedSnapshot(cfg, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := SeedSnapshot(cfg, bytes.NewReader(data)); err == nil {
		t.Fatal("seeding over raft state succeeded")
	}

	n, err := Open(Config{Dir: dir, NodeID: "n-new", Advertise: l.Addr().String(), Layer: l, Bootstrap: true,
		Logger: slog.New(slog.DiscardHandler), Tune: fast})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitLeader(t, n)
	if err := n.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	ns := n.State()
	for _, j := range st.Jobs(JobFilter{}) {
		got, ok := ns.Job(j.ID)
		if !ok || got.Phase != j.Phase || got.StdoutHash != j.StdoutHash || got.CommitIndex != j.CommitIndex || got.NodeID != j.NodeID {
			t.Fatalf("job %s: %+v, want %+v", j.ID, got, j)
		}
	}
	if sec, ok := ns.Secret("tok"); !ok || string(sec.Sealed) != "sealed" {
		t.Fatal("secret not restored")
	}
	if ns.Policy().Version != 1 {
		t.Fatal("policy not restored")
	}
	for _, id := range []string{"n-old1", "n-old2"} {
		if !ns.IsRevoked("node", id) {
			t.Fatalf("old node %s not revoked by the seed's command", id)
		}
	}
	if ns.IsRevoked("device", "d-op") {
		t.Fatal("the operator device was revoked")
	}
	if got := n.Stats().Term; got <= meta.Term {
		t.Fatalf("new leader at term %d, not above the snapshot's %d", got, meta.Term)
	}
	j, err := n.Apply(context.Background(), submit("fresh"))
	if err != nil {
		t.Fatal(err)
	}
	if j.CommitIndex <= meta.Index {
		t.Fatalf("new job at index %d, not after the snapshot's %d", j.CommitIndex, meta.Index)
	}
	conf := n.Raft().GetConfiguration()
	if err := conf.Error(); err != nil || len(conf.Configuration().Servers) != 1 || conf.Configuration().Servers[0].ID != "n-new" {
		t.Fatalf("configuration %+v %v", conf.Configuration(), err)
	}
}

// Recover makes one survivor of three the only voter, keeping every job
// its log holds, entries after its last snapshot included, and commits
// the recovery's commands. A dry run changes nothing.
func TestRecoverOneSurvivor(t *testing.T) {
	var layers []tcpLayer
	for i := 0; i < 3; i++ {
		layers = append(layers, newLayer(t))
	}
	var servers []raft.Server
	for i, l := range layers {
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: raft.ServerAddress(l.Addr().String())})
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var stores []*Store
	for i, l := range layers {
		s, err := Open(Config{Dir: dirs[i], NodeID: fmt.Sprintf("n%d", i), Advertise: l.Addr().String(), Layer: l,
			Logger: slog.New(slog.DiscardHandler), Tune: steady})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	if err := stores[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; i < 3000 && !cond(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if !cond() {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	// Submit through whoever leads, again after a lost leadership (a
	// loaded machine can cost an election): resubmitting a job replays it.
	applyOnLeader := func(cmd *raftpb.Command) {
		t.Helper()
		var err error
		waitFor("a commit", func() bool {
			for _, s := range stores {
				if s.IsLeader() {
					_, err = s.Apply(context.Background(), cmd)
					return err == nil
				}
			}
			return false
		})
	}
	for i := 0; i < 30; i++ {
		applyOnLeader(submit(fmt.Sprintf("j%02d", i)))
		if i == 20 {
			if err := stores[0].raft.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor("n0 to apply every job", func() bool { return stores[0].State().JobCount() == 30 })
	for _, s := range stores {
		s.Close()
	}

	revokeOthers := func(st *State, old []ConfServer) []*raftpb.Command {
		var out []*raftpb.Command
		for _, s := range old {
			if s.ID != "n0" && s.Voter {
				out = append(out, &raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: s.ID}}}},
					&raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{Kind: "node", Id: s.ID}}})
			}
		}
		return out
	}
	cfg := RecoverConfig{Dir: dirs[0], NodeID: "n0", Address: layers[0].Addr().String(), Commands: revokeOthers,
		DryRun: true, Logger: slog.New(slog.DiscardHandler)}
	info, err := Recover(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if info.Jobs != 30 || len(info.Servers) != 3 || info.Appended != 0 || info.LastIndex == 0 {
		t.Fatalf("dry run: %+v", info)
	}
	cfg.DryRun = false
	info2, err := Recover(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if info2.LastIndex != info.LastIndex || info2.Appended != 4 {
		t.Fatalf("dry run %+v then recovery %+v", info, info2)
	}

	s, err := Open(Config{Dir: dirs[0], NodeID: "n0", Advertise: layers[0].Addr().String(), Layer: layers[0],
		Logger: slog.New(slog.DiscardHandler), Tune: steady})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitLeader(t, s)
	if err := s.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.State().JobCount(); got != 30 {
		t.Fatalf("%d jobs after recovery, want 30", got)
	}
	for _, id := range []string{"n1", "n2"} {
		if !s.State().IsRevoked("node", id) {
			t.Fatalf("%s not revoked", id)
		}
	}
	if _, err := s.Apply(context.Background(), submit("after")); err != nil {
		t.Fatal(err)
	}
	conf := s.Raft().GetConfiguration().Configuration()
	if len(conf.Servers) != 1 || conf.Servers[0].ID != "n0" {
		t.Fatalf("configuration after recovery: %+v", conf)
	}
	if _, err := Recover(RecoverConfig{Dir: t.TempDir(), NodeID: "x", Address: "127.0.0.1:1"}); err == nil {
		t.Fatal("recovering an empty dir succeeded")
	}
}

// A snapshot whose audit journal was altered after it was written (a
// record's detail changed, its hashes kept) scans, with the break named:
// the file's records decode, so it is the chain that says it.
func TestSnapshotScanNamesABrokenJournal(t *testing.T) {
	s := openStore(t, t.TempDir(), "n-old1", true)
	defer s.Close()
	waitLeader(t, s)
	populate(t, s)
	_, data := takeSnapshot(t, s)

	br := bufio.NewReader(bytes.NewReader(data[len(snapshotMagic):]))
	var hdr raftpb.Snapshot
	if err := protodelim.UnmarshalFrom(br, &hdr); err != nil {
		t.Fatal(err)
	}
	if len(hdr.Journal) < 2 {
		t.Fatalf("the journal holds %d records; the test needs two", len(hdr.Journal))
	}
	hdr.Journal[1].Detail += " (edited)"
	var out bytes.Buffer
	out.Write(snapshotMagic)
	if _, err := protodelim.MarshalTo(&out, &hdr); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(&out, br); err != nil {
		t.Fatal(err)
	}
	c, err := ScanSnapshot(&out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Audit.Problem == "" || c.Audit.BadSeq != hdr.Journal[1].Seq {
		t.Fatalf("an edited journal record scanned as bad seq %d, problem %q; want seq %d named", c.Audit.BadSeq, c.Audit.Problem, hdr.Journal[1].Seq)
	}
}
