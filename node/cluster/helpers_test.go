package cluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/quic-go/quic-go"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/testwatch"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// testCA issues every test node's certificate; otherCA is a stranger's.
var testCA, otherCA *identity.CA

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if testCA, err = identity.InitCA(filepath.Join(dir, "ca"), "test"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer testCA.Close()
		if otherCA, err = identity.InitCA(filepath.Join(dir, "other"), "other"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer otherCA.Close()
		return m.Run()
	}()
	os.Exit(code)
}

// issue makes a credential the way a joiner does: key and CSR here,
// signature by ca.
func issue(t testing.TB, ca *identity.CA, kind identity.Kind) *identity.Credential {
	t.Helper()
	p := identity.Principal{Kind: kind, ID: identity.NewID(kind)}
	key, csr, err := identity.NewKeyAndCSR(p)
	if err != nil {
		t.Fatalf("NewKeyAndCSR: %v", err)
	}
	chain, err := ca.Sign(context.Background(), csr, p, time.Hour)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Root())
	return &identity.Credential{Principal: p, Leaf: chain[0], Chain: chain[1:], Key: key, Roots: pool, RootCerts: []*x509.Certificate{ca.Root()}}
}

// logger discards logs unless CLUSTER_TEST_LOG is set.
func logger(name string) *slog.Logger {
	if os.Getenv("CLUSTER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastRaft shortens raft's timers like node's Fast mode.
func fastRaft(c *raft.Config) {
	c.HeartbeatTimeout, c.ElectionTimeout = 200*time.Millisecond, 200*time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 10 * time.Millisecond
}

// tnode is one in-process node: transport, raft store and cluster. It can
// be stopped and started again on the same raft dir and address.
type tnode struct {
	t      testing.TB
	cred   *identity.Credential
	id     string
	dir    string
	addr   string // fixed after the first start
	target int
	meta   Meta
	tuning *Tuning            // nil: FastTuning
	raft   func(*raft.Config) // nil: fastRaft
	caKeys func() []CAKey     // Config.CAKeys
	old    bool               // an older version: no FeatureBatch
	// nodeWorkOn is Config.NodeWorkOn (nil: everything allowed).
	nodeWorkOn func(pr identity.Principal, action, jobID, submitter, kind string) error

	mu    sync.Mutex
	tr    *mesh.Transport
	store *consensus.Store
	cl    *Cluster
}

func newNode(t testing.TB, target int) *tnode {
	testwatch.Track(t)
	cred := issue(t, testCA, identity.KindNode)
	n := &tnode{t: t, cred: cred, id: cred.Principal.ID, dir: t.TempDir(), target: target}
	t.Cleanup(n.stop)
	return n
}

// start brings the node up; bootstrap only matters on a fresh raft dir.
func (n *tnode) start(bootstrap bool) {
	n.t.Helper()
	if err := n.tryStart(bootstrap); err != nil {
		n.t.Fatalf("start %s: %v", n.id, err)
	}
}

func (n *tnode) tryStart(bootstrap bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	listen := n.addr
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	log := logger(n.id)
	// A short handshake timeout: dials to stopped nodes (raft heartbeats,
	// gossip reconnects) give up quickly, so stopping is fast.
	tr, err := mesh.Listen(mesh.Config{ListenAddr: listen, Logger: log, QUIC: &quic.Config{HandshakeIdleTimeout: time.Second},
		ServerTLS: identity.ServerTLSConfig(n.cred, nil, nil), ClientTLS: identity.ClientTLSConfig(n.cred, nil, nil)})
	if err != nil {
		return err
	}
	n.addr = tr.Addr().String()
	st, err := consensus.Open(consensus.Config{Dir: n.dir, NodeID: n.id, Advertise: tr.AdvertiseAddr(),
		Layer: NodeOnlyLayer(tr.RaftLayer(), log), Bootstrap: bootstrap, Logger: log, Tune: n.raftTune()})
	if err != nil {
		tr.Close()
		return err
	}
	cfg := Config{NodeID: n.id, Transport: tr, Store: st, Meta: n.meta, TargetVoters: n.target, Fast: true, Logger: log, CAKeys: n.caKeys, withoutBatch: n.old, NodeWorkOn: n.nodeWorkOn}
	if n.tuning != nil {
		cfg.Tuning, cfg.Fast = *n.tuning, false
	}
	cl, err := New(cfg)
	if err == nil {
		err = cl.Start(context.Background())
	}
	if err != nil {
		st.Close()
		tr.Close()
		return err
	}
	n.tr, n.store, n.cl = tr, st, cl
	return nil
}

// stop is a crash as far as the others can tell: no leave.
func (n *tnode) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cl != nil {
		n.cl.Close()
		n.store.Close()
		n.tr.Close()
		n.cl, n.store, n.tr = nil, nil, nil
	}
}

func (n *tnode) join(seed *tnode) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.cl.Join(ctx, []string{seed.addr}); err != nil {
		n.t.Fatalf("%s join: %v", n.id, err)
	}
}

// formCluster starts n nodes: the first bootstraps, the others join it.
func formCluster(t testing.TB, count, target int, tuning ...Tuning) []*tnode {
	t.Helper()
	nodes := make([]*tnode, count)
	for i := range nodes {
		nodes[i] = newNode(t, target)
		if len(tuning) > 0 {
			nodes[i].tuning = &tuning[0]
		}
		nodes[i].start(i == 0)
		if i > 0 {
			nodes[i].join(nodes[0])
		}
	}
	return nodes
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("timed out after %v waiting for %s: %v", within, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// view summarises one node's Members for convergence checks.
type view struct {
	alive, voters, nonVoters int
	leader                   string
	byID                     map[string]Member
}

func viewOf(n *tnode) view {
	v := view{byID: map[string]Member{}}
	for _, m := range n.cl.Members() {
		v.byID[m.ID] = m
		if m.State == StateAlive {
			v.alive++
		}
		if m.Voter {
			v.voters++
		} else if m.InRaft {
			v.nonVoters++
		}
		if m.Leader {
			v.leader = m.ID
		}
	}
	return v
}

// converged checks that every node in nodes sees exactly those nodes alive,
// the given number of voters and non-voters, and the same leader (one of
// them).
func converged(nodes []*tnode, voters, nonVoters int) error {
	leader := ""
	for _, n := range nodes {
		v := viewOf(n)
		for _, o := range nodes {
			if m, ok := v.byID[o.id]; !ok || m.State != StateAlive || !m.InRaft {
				return fmt.Errorf("%s sees %s as %+v", n.id, o.id, m)
			}
		}
		if v.voters != voters || v.nonVoters != nonVoters {
			return fmt.Errorf("%s sees %d voters and %d non-voters, want %d and %d", n.id, v.voters, v.nonVoters, voters, nonVoters)
		}
		if v.leader == "" || (leader != "" && v.leader != leader) {
			return fmt.Errorf("%s sees leader %q, others %q", n.id, v.leader, leader)
		}
		leader = v.leader
	}
	for _, n := range nodes {
		if n.id == leader {
			return nil
		}
	}
	return fmt.Errorf("leader %s is not among the nodes", leader)
}

func leaderOf(t testing.TB, nodes []*tnode) *tnode {
	t.Helper()
	for _, n := range nodes {
		if n.store.IsLeader() {
			return n
		}
	}
	t.Fatal("no node is leader")
	return nil
}

func others(nodes []*tnode, not ...*tnode) []*tnode {
	var out []*tnode
outer:
	for _, n := range nodes {
		for _, x := range not {
			if n == x {
				continue outer
			}
		}
		out = append(out, n)
	}
	return out
}

func submit(id string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{
		Job: &raftpb.JobRecord{Id: id, Kind: "wasm", ModuleSha256: "ab", Input: []byte("in")}}}}
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (n *tnode) raftTune() func(*raft.Config) {
	if n.raft != nil {
		return n.raft
	}
	return fastRaft
}

// olderThird starts a 3-voter cluster whose third member runs an older
// version (tnode.old: it advertises none of the gated features), and
// waits until it has converged.
func olderThird(t *testing.T) []*tnode {
	t.Helper()
	nodes := []*tnode{newNode(t, 3), newNode(t, 3), newNode(t, 3)}
	nodes[2].old = true
	nodes[0].start(true)
	nodes[1].start(false)
	nodes[1].join(nodes[0])
	nodes[2].start(false)
	nodes[2].join(nodes[0])
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	return nodes
}
