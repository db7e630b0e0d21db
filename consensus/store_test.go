package consensus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// tcpLayer is a test-only raft.StreamLayer over loopback TCP; production
// uses mesh's QUIC layer.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(a raft.ServerAddress, t time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(a), t)
}

func newLayer(t *testing.T) tcpLayer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return tcpLayer{ln}
}

func fast(c *raft.Config) {
	c.HeartbeatTimeout = 100 * time.Millisecond
	c.ElectionTimeout = 100 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

func openStore(t *testing.T, dir, id string, bootstrap bool) *Store {
	t.Helper()
	l := newLayer(t)
	s, err := Open(Config{Dir: dir, NodeID: id, Advertise: l.Addr().String(), Layer: l,
		Bootstrap: bootstrap, Logger: slog.New(slog.DiscardHandler), Tune: fast})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitLeader(t *testing.T, s *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !s.IsLeader() {
		select {
		case <-ctx.Done():
			t.Fatal("no leadership")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func submit(id string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{
		Job: &raftpb.JobRecord{Id: id, Kind: "wasm", ModuleSha256: "ab", Input: []byte("in")}}}}
}

func assign(id string, attempt uint32, node string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_AssignJob{AssignJob: &raftpb.AssignJob{Id: id, Attempt: attempt, NodeId: node}}}
}

func finish(id string, attempt uint32, node string, out string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: id, Attempt: attempt, NodeId: node, Ok: true, Stdout: []byte(out)}}}
}

func TestLifecycleAndFencing(t *testing.T) {
	s := openStore(t, t.TempDir(), "n1", true)
	defer s.Close()
	waitLeader(t, s)
	ctx := context.Background()

	j, err := s.Apply(ctx, submit("j1"))
	if err != nil || j.Phase != PhaseQueued || j.CommitIndex == 0 {
		t.Fatalf("submit: %+v %v", j, err)
	}
	if again, err := s.Apply(ctx, submit("j1")); err != nil || again.CommitIndex != j.CommitIndex {
		t.Fatalf("resubmitting the same job must replay it: %+v %v", again, err)
	}
	other := submit("j1")
	other.GetSubmitJob().Job.Input = []byte("different")
	if _, err := s.Apply(ctx, other); !errors.Is(err, ErrConflict) {
		t.Fatalf("same id, different content: want conflict, got %v", err)
	}
	if _, err := s.Apply(ctx, assign("j1", 2, "n1")); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("skipping an attempt must be refused, got %v", err)
	}
	if j, err = s.Apply(ctx, assign("j1", 1, "n1")); err != nil || j.Phase != PhaseRunning {
		t.Fatalf("assign: %+v %v", j, err)
	}
	// The worker dies: requeue, reassign as attempt 2; attempt 1's late result is refused.
	if _, err := s.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{Id: "j1", Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, assign("j1", 2, "n2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, finish("j1", 1, "n1", "stale")); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("stale result accepted: %v", err)
	}
	if j, err = s.Apply(ctx, finish("j1", 2, "n2", "fresh")); err != nil || j.Phase != PhaseCompleted || string(j.Stdout) != "fresh" {
		t.Fatalf("finish: %+v %v", j, err)
	}
	if _, err := s.Apply(ctx, finish("j1", 2, "n2", "again")); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("second completion accepted: %v", err)
	}
	if got := s.State().StaleResults(); got != 2 {
		t.Fatalf("stale results = %d, want 2", got)
	}
	if _, err := s.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: "j1"}}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("cancel of a completed job: %v", err)
	}
	if _, err := s.Apply(ctx, assign("nope", 1, "n1")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

func TestRestartRecoversCommittedJobs(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, "n1", true)
	waitLeader(t, s)
	for i := 0; i < 20; i++ {
		if _, err := s.Apply(context.Background(), submit(fmt.Sprintf("j%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), submit("after-snap")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, dir, "n1", true) // bootstrap ignored: state exists
	defer s2.Close()
	waitLeader(t, s2)
	if err := s2.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	jobs := s2.State().Jobs(JobFilter{})
	if len(jobs) != 21 || jobs[0].ID != "j00" || jobs[20].ID != "after-snap" {
		t.Fatalf("recovered %d jobs: %+v", len(jobs), jobs)
	}
	page := s2.State().Jobs(JobFilter{AfterID: "j18", Limit: 5})
	if len(page) != 2 || page[0].ID != "j19" {
		t.Fatalf("pagination: %+v", page)
	}
}

// threeServers is a bootstrapped three-server cluster on loopback TCP:
// open(i, layer) reopens server i on its data dir (the caller closes what
// it replaces); leader is the index of the first server seen leading.
type threeServers struct {
	stores []*Store
	layers []tcpLayer
	dirs   []string
	leader int
}

func newThreeServers(t *testing.T) *threeServers {
	t.Helper()
	c := &threeServers{stores: make([]*Store, 3), dirs: make([]string, 3), leader: -1}
	servers := make([]raft.Server, 3)
	for i := range 3 {
		c.layers = append(c.layers, newLayer(t))
		c.dirs[i] = t.TempDir()
		servers[i] = raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: raft.ServerAddress(c.layers[i].Addr().String())}
	}
	for i, l := range c.layers {
		c.stores[i] = c.open(t, i, l)
	}
	t.Cleanup(func() {
		for _, s := range c.stores {
			if s != nil {
				s.Close()
			}
		}
	})
	if err := c.stores[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); c.leader < 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for i, s := range c.stores {
			if s.IsLeader() {
				c.leader = i
			}
		}
	}
	if c.leader < 0 {
		t.Fatal("no leader")
	}
	return c
}

func (c *threeServers) open(t *testing.T, i int, l tcpLayer) *Store {
	t.Helper()
	s, err := Open(Config{Dir: c.dirs[i], NodeID: fmt.Sprintf("n%d", i), Advertise: l.Addr().String(), Layer: l,
		Logger: slog.New(slog.DiscardHandler), Tune: fast})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// everywhere waits until every open server has applied job id.
func (c *threeServers) everywhere(t *testing.T, id string) {
	t.Helper()
	for i, s := range c.stores {
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, ok := s.State().Job(id); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached n%d", id, i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestThreeServersReplicate(t *testing.T) {
	c := newThreeServers(t)
	leader := c.stores[c.leader]
	if _, err := leader.Apply(context.Background(), submit("r1")); err != nil {
		t.Fatal(err)
	}
	c.everywhere(t, "r1")
	for _, s := range c.stores {
		if s != leader {
			if _, err := s.Apply(context.Background(), submit("r2")); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("follower apply: want not_leader, got %v", err)
			}
		}
	}
}

func TestParsePhase(t *testing.T) {
	for in, want := range map[string]Phase{"queued": PhaseQueued, "RUNNING": PhaseRunning,
		"Waiting-For-Approval": PhaseWaitingForApproval, "cancelled": PhaseAborted, "expired": PhaseExpired} {
		if got, err := ParsePhase(in); err != nil || got != want {
			t.Errorf("ParsePhase(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParsePhase("bogus"); err == nil {
		t.Error("bogus phase accepted")
	}
	for _, p := range AllPhases {
		if got, _ := ParsePhase(p.String()); got != p {
			t.Errorf("round trip %v", p)
		}
	}
}

// A log that holds many bytes in few entries (arrays of many tasks) is
// snapshotted for its size: the entry-count threshold would wait for
// thousands more entries, and a restart replays every byte since the last
// snapshot (a trial: 10 s and 3.3 GB to restart after two big arrays).
func TestSnapshotForTheLogsSize(t *testing.T) {
	l := newLayer(t)
	s, err := Open(Config{Dir: t.TempDir(), NodeID: "n1", Advertise: l.Addr().String(), Layer: l,
		Bootstrap: true, Logger: slog.New(slog.DiscardHandler), Tune: fast, SnapshotAfterBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitLeader(t, s)
	big := bytes.Repeat([]byte("x"), 100<<10)
	for i := range 2 {
		if _, err := s.Apply(context.Background(), submitWith(fmt.Sprint("small-", i), func(r *raftpb.JobRecord) { r.Input = big })); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(snapshotEvery + time.Second)
	if got := s.Raft().Stats()["last_snapshot_index"]; got != "0" {
		t.Fatalf("a snapshot at %s with 200 KiB applied, under the 256 KiB", got)
	}
	if _, err := s.Apply(context.Background(), submitWith("over", func(r *raftpb.JobRecord) { r.Input = big })); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2*snapshotEvery + 5*time.Second)
	for s.Raft().Stats()["last_snapshot_index"] == "0" {
		if time.Now().After(deadline) {
			t.Fatal("no snapshot with 300 KiB applied in 3 entries")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := s.fsm.sinceSnapshot(); n != 0 {
		t.Fatalf("%d bytes counted since the snapshot", n)
	}
}
