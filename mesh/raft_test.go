package mesh_test

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
)

// logFSM records applied commands.
type logFSM struct {
	mu   sync.Mutex
	cmds []string
}

func (f *logFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, string(l.Data))
	return nil
}

func (f *logFSM) has(cmd string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.cmds, cmd)
}

func (f *logFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, fmt.Errorf("not supported in this test")
}
func (f *logFSM) Restore(io.ReadCloser) error { return fmt.Errorf("not supported in this test") }

type raftNode struct {
	tr   *mesh.Transport
	raft *raft.Raft
	fsm  *logFSM
}

func startRaft(t *testing.T, ca *meshtest.CA, name string) *raftNode {
	t.Helper()
	tr := newNode(t, ca, name)
	logger := hclog.New(&hclog.LoggerOptions{Name: name, Output: io.Discard})
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  tr.RaftLayer(),
		MaxPool: 3,
		Timeout: 2 * time.Second,
		Logger:  logger,
	})
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(name)
	cfg.HeartbeatTimeout = 300 * time.Millisecond
	cfg.ElectionTimeout = 300 * time.Millisecond
	cfg.LeaderLeaseTimeout = 150 * time.Millisecond
	cfg.CommitTimeout = 20 * time.Millisecond
	cfg.Logger = logger
	fsm := &logFSM{}
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(cfg, fsm, store, store, raft.NewInmemSnapshotStore(), nt)
	if err != nil {
		t.Fatalf("NewRaft %s: %v", name, err)
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	return &raftNode{tr: tr, raft: r, fsm: fsm}
}

func leaderOf(nodes []*raftNode) *raftNode {
	for _, n := range nodes {
		if n.raft.State() == raft.Leader {
			return n
		}
	}
	return nil
}

func TestRaftClusterOverRaftLayer(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	nodes := []*raftNode{startRaft(t, ca, "n1"), startRaft(t, ca, "n2"), startRaft(t, ca, "n3")}
	var servers []raft.Server
	for i, n := range nodes {
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i+1)), Address: raft.ServerAddress(n.tr.AdvertiseAddr())})
	}
	if err := nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	// Leadership may move under load; retry Apply on whoever leads.
	eventually(t, 15*time.Second, "a leader that applies \"first\"", func() bool {
		l := leaderOf(nodes)
		return l != nil && l.raft.Apply([]byte("first"), 2*time.Second).Error() == nil
	})
	eventually(t, 10*time.Second, "every node applied \"first\"", func() bool {
		return nodes[0].fsm.has("first") && nodes[1].fsm.has("first") && nodes[2].fsm.has("first")
	})

	// Cut the leader off from both followers; they elect a new leader.
	var leader *raftNode
	eventually(t, 10*time.Second, "a leader", func() bool { leader = leaderOf(nodes); return leader != nil })
	leader.tr.SetFault(func(string) bool { return true })
	var rest []*raftNode
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	eventually(t, 15*time.Second, "a new leader among the majority", func() bool { return leaderOf(rest) != nil })
	eventually(t, 10*time.Second, "an Apply on the majority's leader", func() bool {
		l := leaderOf(rest)
		return l != nil && l.raft.Apply([]byte("second"), 2*time.Second).Error() == nil
	})
	if leader.fsm.has("second") {
		t.Fatal("the partitioned old leader applied an entry committed without it")
	}

	// Heal: the old leader rejoins and catches up.
	leader.tr.SetFault(nil)
	eventually(t, 15*time.Second, "the old leader applied \"second\" after heal", func() bool {
		return leader.fsm.has("second")
	})
}
