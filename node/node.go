package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/node/api"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/node/scheduler"
	"github.com/palyra-mesh/palyra/node/worker"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	pruntime "github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

// Node is a running node. Start returns once it serves; Close stops it.
type Node struct {
	cfg       Config
	log       *slog.Logger
	layout    Layout
	state     State
	cred      *identity.Live
	ca        *identity.CA // nil unless this node holds the cluster CA
	transport *mesh.Transport
	storeMu   sync.RWMutex
	store     *consensus.Store
	authz     *api.Authorizer
	wasm      *wasm.Executor
	blobs     *blob.Store
	worker    *worker.Worker
	http      *http3.Server
	unlock    func()

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// Run starts a node and blocks until ctx ends, then stops it cleanly.
func Run(ctx context.Context, cfg Config) error {
	n, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	n.log.Info("shutting down")
	return n.Close()
}

// Start opens the data dir (initialising a new cluster on first start),
// starts every component and returns once the API is being served.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg.defaults()
	l := Layout{Dir: cfg.DataDir}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	n := &Node{cfg: cfg, layout: l}
	if n.unlock, err = l.lock(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()

	st, err := l.ReadState()
	if errors.Is(err, ErrNoState) {
		st, err = initCluster(ctx, l, cfg)
	}
	if err != nil {
		return nil, err
	}
	n.state = st
	n.log = cfg.Logger.With("node", st.NodeID)
	cred, err := identity.LoadCredential(l.NodeCredDir())
	if err != nil {
		return nil, fmt.Errorf("load node credential: %w", err)
	}
	n.cred = identity.NewLive(cred)
	if n.ca, err = n.loadCA(); err != nil {
		return nil, err
	}

	if n.transport, err = mesh.Listen(mesh.Config{
		ListenAddr: cfg.Listen,
		// Callers without a certificate may connect to reach the pairing
		// call only (the API refuses everything else; mesh refuses them on
		// the peer protocol).
		ServerTLS: identity.LiveServerTLSConfig(n.cred, nil, n.peerCheck, true),
		ClientTLS: identity.LiveClientTLSConfig(n.cred, nil, n.peerCheck),
		Logger:    n.log,
	}); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	addr := n.transport.AdvertiseAddr()
	if st.Address != addr {
		n.state.Address = addr
		if err := l.WriteState(n.state); err != nil {
			return nil, fmt.Errorf("record address: %w", err)
		}
	}

	if n.blobs, err = blob.Open(l.BlobDir()); err != nil {
		return nil, err
	}
	slots := cfg.WasmSlots
	if slots <= 0 {
		slots = 2 * runtime.NumCPU()
	}
	if n.wasm, err = wasm.New(ctx, wasm.Config{CacheDir: l.WasmCacheDir(), MaxConcurrent: slots, Logger: n.log}); err != nil {
		return nil, fmt.Errorf("start wasm runtime: %w", err)
	}

	sc := consensus.Config{
		Dir: l.RaftDir(), NodeID: st.NodeID, Advertise: addr, Layer: n.transport.RaftLayer(),
		Bootstrap: true, Logger: n.log,
	}
	if cfg.Fast {
		sc.Tune = func(c *raft.Config) {
			c.HeartbeatTimeout, c.ElectionTimeout = 150*time.Millisecond, 150*time.Millisecond
			c.LeaderLeaseTimeout = 100 * time.Millisecond
		}
	}
	store, err := consensus.Open(sc)
	if err != nil {
		return nil, err
	}
	n.storeMu.Lock()
	n.store = store
	n.storeMu.Unlock()
	if n.authz, err = api.NewAuthorizer(store.State(), n.log); err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel

	// API first, so the CLI gets answers (or clear errors) while raft settles.
	info := api.Info{NodeID: st.NodeID, Address: addr, ClusterName: st.ClusterName,
		CAFingerprint: fingerprint(cred), Version: cfg.Version, Started: time.Now()}
	opts := api.Options{Control: n.store, Blobs: n.blobs, Validator: n.wasm, Authz: n.authz,
		CertTTL: cfg.CertTTL, Info: info, Logger: n.log,
		Peers: func() []string { return []string{addr} }}
	if n.ca != nil {
		opts.Issuer = n.ca
	}
	apiSrv := api.New(opts)
	n.http = &http3.Server{Handler: apiSrv.Handler(), Logger: n.log}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.serveAPI(runCtx)
	}()

	n.worker = worker.New(worker.Config{
		NodeID: st.NodeID, Control: n.store, Blobs: n.blobs,
		Executors: map[pruntime.Kind]pruntime.Executor{pruntime.KindWasm: n.wasm}, Logger: n.log,
	})
	// Wait for a leader and catch up, so Recover sees every placement made
	// on this node before it crashed, before anything new is placed here.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := n.store.WaitLeader(wctx); err != nil {
		return nil, fmt.Errorf("waiting for raft: %w", err)
	}
	if n.store.IsLeader() {
		if err := n.store.Barrier(wctx); err != nil {
			return nil, fmt.Errorf("raft barrier: %w", err)
		}
	}
	if err := n.worker.Recover(wctx); err != nil {
		return nil, err
	}
	if n.ca != nil {
		if err := n.registerInitMembers(wctx); err != nil {
			return nil, err
		}
	}
	n.wg.Add(4)
	go func() { defer n.wg.Done(); n.authz.Watch(runCtx) }()
	go func() { defer n.wg.Done(); n.renewLoop(runCtx) }()
	go func() { defer n.wg.Done(); n.worker.Run(runCtx) }()
	go func() { defer n.wg.Done(); n.runScheduler(runCtx, slots) }()

	n.log.Info("node ready", "address", addr, "data_dir", l.Dir, "cluster", st.ClusterName,
		"wasm_slots", slots, "raft", n.store.Stats().State)
	return n, nil
}

func fingerprint(c *identity.Credential) string {
	if len(c.RootCerts) == 0 {
		return ""
	}
	sum := sha256.Sum256(c.RootCerts[0].Raw)
	return hex.EncodeToString(sum[:])
}

// serveAPI serves every API connection the transport accepts over HTTP/3.
func (n *Node) serveAPI(ctx context.Context) {
	conns := n.transport.APIConns()
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-conns:
			if !ok {
				return
			}
			go func(c *quic.Conn) {
				if err := n.http.ServeQUICConn(c); err != nil && ctx.Err() == nil {
					n.log.Debug("api connection ended", "remote", c.RemoteAddr(), "err", err)
				}
			}(c)
		}
	}
}

// runScheduler places queued jobs while this node is the leader.
func (n *Node) runScheduler(ctx context.Context, slots int) {
	leader := n.store.LeadershipChanges()
	isLeader := false
	for {
		if isLeader {
			n.schedule(ctx, slots)
		}
		var changed <-chan struct{}
		if isLeader {
			changed = n.store.State().Changed()
		}
		select {
		case <-ctx.Done():
			return
		case isLeader = <-leader:
		case <-changed:
		}
	}
}

// schedule commits one round of placements. Single-node for now: the only
// worker is this node.
func (n *Node) schedule(ctx context.Context, slots int) {
	st := n.store.State()
	queued := st.Jobs(consensus.JobFilter{Phase: consensus.PhaseQueued})
	if len(queued) == 0 {
		return
	}
	running := len(st.Jobs(consensus.JobFilter{Phase: consensus.PhaseRunning, NodeID: n.state.NodeID}))
	nodes := []scheduler.Node{{ID: n.state.NodeID, Eligible: true,
		Slots: map[string]int{"wasm": slots}, Running: map[string]int{"wasm": running}}}
	jobs := make([]scheduler.Job, len(queued))
	for i, j := range queued {
		jobs[i] = scheduler.Job{ID: j.ID, Kind: j.Kind, Attempt: j.Attempt, Order: j.CommitIndex}
	}
	plan, _ := scheduler.Plan(nodes, jobs)
	now := time.Now().UnixMilli()
	for _, p := range plan {
		_, err := n.store.Apply(ctx, assignCmd(p, now))
		if err != nil && !errors.Is(err, consensus.ErrConflict) && !errors.Is(err, consensus.ErrStaleAttempt) {
			n.log.Warn("placement not committed", "job", p.JobID, "err", err)
			return
		}
	}
}

// apply commits a command (through the leader).
func (n *Node) apply(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error) {
	return n.store.Apply(ctx, cmd)
}

// Addr is the node's QUIC address.
func (n *Node) Addr() string { return n.state.Address }

// ID is the node's id.
func (n *Node) ID() string { return n.state.NodeID }

// Layout is the node's data-dir layout.
func (n *Node) Layout() Layout { return n.layout }

// Close stops the node: API, worker and scheduler, raft, transport.
func (n *Node) Close() error {
	var err error
	n.closed.Do(func() {
		if n.cancel != nil {
			n.cancel()
		}
		if n.http != nil {
			n.http.Close()
		}
		n.wg.Wait()
		if n.store != nil {
			err = errors.Join(err, n.store.Close())
		}
		if n.ca != nil {
			err = errors.Join(err, n.ca.Close())
		}
		if n.wasm != nil {
			err = errors.Join(err, n.wasm.Close(context.Background()))
		}
		if n.transport != nil {
			err = errors.Join(err, n.transport.Close())
		}
		if n.unlock != nil {
			n.unlock()
		}
	})
	return err
}
