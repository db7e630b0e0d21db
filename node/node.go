package node

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/time/rate"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/node/api"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/node/worker"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	pruntime "github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/browser"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

// Node is a running node. Start returns once it serves; Close stops it.
type Node struct {
	cfg    Config
	log    *slog.Logger
	layout Layout
	state  State
	// stateMu serialises changes to state made while the node runs
	// (updateState); Start's own happen before anything else runs.
	stateMu sync.Mutex
	cred    *identity.Live
	credMu  sync.Mutex // serialises saving and swapping this node's credentials
	keeper  *caKeeper  // the cluster CA keys this node holds (voters), the trust bundle
	// ledgerWarn bounds the warnings about certificates the ledger refused
	// (ledgerRefusal).
	ledgerWarn rate.Sometimes
	// clusterRef is n.cluster for the TLS handshakes' ledger check, which
	// can run before startCluster has set it; judge shares its read
	// indexes.
	clusterRef atomic.Pointer[cluster.Cluster]
	judge      ledgerJudge
	metaMu     sync.Mutex
	labels     map[string]string // gossiped labels: the configured ones and the CA's
	// refused: the cluster refuses this node (watchSelfRefused); raft's
	// warnings and errors are debug meanwhile.
	refused atomic.Bool
	// workerReady is set once the worker has recovered what a previous
	// process left: until then the node gossips no capacity, so nothing is
	// placed on it that Recover would take for a leftover and requeue.
	workerReady bool
	// runHereOK caches, since runHereAt (Unix ns), whether every member
	// applies RunHere entries (runHereSupported).
	runHereOK    atomic.Bool
	runHereAt    atomic.Int64
	transport    *mesh.Transport
	storeMu      sync.RWMutex
	store        *consensus.Store
	cluster      *cluster.Cluster
	authz        *api.Authorizer
	wasm         *wasm.Executor
	browser      *browser.Executor // nil when this node runs no browser jobs
	blobs        *blob.Store
	blobNet      *blobNet
	worker       *worker.Worker
	http         *http3.Server
	unlock       func()
	slots        int
	browserSlots int
	timers       Timers
	metrics      *nodeMetrics
	metricsAddr  string
	metricsFrom  string // where the metrics address came from, for the log

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closed   sync.Once
	leaveReq chan struct{}
	caCl     caClient
	dataKey  []byte // seals secrets at rest (cluster-wide)
}

// Run starts a node and blocks until ctx ends (or the node is asked to
// leave the cluster), then stops it cleanly.
func Run(ctx context.Context, cfg Config) error {
	n, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return n.Wait(ctx)
}

// leaveAnswerWait bounds how long a node that left keeps its API up for
// the calls in flight, above all the Leave call itself, to be answered.
const leaveAnswerWait = 3 * time.Second

// Wait blocks until ctx ends or the node has left the cluster (the API's
// Leave), then stops the node. After a leave the API is shut down
// gracefully first: the Leave call is answered before the connections
// close (closing at once cut the answer off, and the caller saw an error
// although the node had left).
func (n *Node) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		n.log.Info("shutting down")
	case <-n.leaveReq:
		n.log.Info("left the cluster; shutting down")
		if n.http != nil {
			sctx, cancel := context.WithTimeout(context.Background(), leaveAnswerWait)
			if err := n.http.Shutdown(sctx); err != nil {
				n.log.Debug("API calls still open after the leave; closing them", "err", err)
			}
			cancel()
		}
	}
	return n.Close()
}

// Start opens the data dir (initialising a new cluster on first start),
// starts every component and returns once the API is being served and the
// node is part of the cluster.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg.defaults()
	l := Layout{Dir: cfg.DataDir}
	if cfg.MetricsListen != "" && cfg.MetricsListen != MetricsOff {
		if err := checkMetricsListen(cfg.MetricsListen, cfg.MetricsAllowRemote); err != nil {
			return nil, err
		}
	}
	tightened, err := makePrivate(l.Dir)
	if err != nil {
		return nil, err
	}
	if tightened {
		cfg.Logger.Warn("the data dir was open to other users; made it private (0700)", "data_dir", l.Dir)
	}
	n := &Node{cfg: cfg, layout: l, leaveReq: make(chan struct{}),
		ledgerWarn: rate.Sometimes{First: 3, Interval: 10 * time.Second}}
	if n.unlock, err = l.lock(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()

	if err = checkNoRestoreInProgress(l); err != nil {
		return nil, err
	}
	st, err := l.ReadState()
	if errors.Is(err, ErrNoState) {
		// A new cluster (CA, keys, operator credential) is made only on a
		// port this node can bind: made first, it would record the busy
		// port, and every later start (and a 'node join' here) would fail.
		listen, _ := listenAddrs(cfg, State{})
		if err := mesh.CheckListen(listen); err != nil {
			return nil, fmt.Errorf("%w; nothing was initialised: pick a free UDP port with --listen HOST:PORT", err)
		}
		st, err = initCluster(ctx, l, cfg)
	}
	if err != nil {
		return nil, err
	}
	if err := checkDataVersion(l, st); err != nil {
		return nil, err
	}
	if st.DataVersion < DataVersion {
		st.DataVersion = DataVersion // a binary that knows less refuses this dir from now on
		if err := l.WriteState(st); err != nil {
			return nil, fmt.Errorf("record the data version: %w", err)
		}
	}
	n.state = st
	n.log = cfg.Logger.With("node", st.NodeID)
	n.cfg.Listen, n.cfg.Advertise = listenAddrs(cfg, st)
	if n.cfg.Advertise == "" {
		if adv, ok := wildcardAdvertise(n.cfg.Listen); ok {
			n.cfg.Advertise = adv
			n.log.Info("listening on every interface; advertising this machine's primary address (set --advertise to choose)", "listen", n.cfg.Listen, "advertise", adv)
		}
	}
	if n.timers, err = n.pickTimers(); err != nil {
		return nil, err
	}
	n.cfg.MetricsListen, n.cfg.MetricsAllowRemote = metricsAddrs(cfg, st)
	n.metricsFrom = "--metrics-listen"
	if n.cfg.MetricsListen != "" && cfg.MetricsListen == "" {
		n.metricsFrom = "recorded in the data dir at the last start (--metrics-listen off stops it)"
		// Recorded at an earlier start: it was checked then, but node.json
		// may have been edited since.
		if err := checkMetricsListen(n.cfg.MetricsListen, n.cfg.MetricsAllowRemote); err != nil {
			return nil, fmt.Errorf("recorded in %s: %w (start with --metrics-listen off to stop serving metrics)", l.StateFile(), err)
		}
	}
	cred, err := identity.LoadCredential(l.NodeCredDir())
	if err != nil {
		return nil, fmt.Errorf("load node credential: %w", err)
	}
	n.cred = identity.NewLive(cred)
	if n.dataKey, err = readDataKey(l); err != nil {
		return nil, err
	}
	if n.keeper, err = n.openKeeper(); err != nil {
		return nil, err
	}
	if err := n.listen(); err != nil {
		return nil, err
	}
	addr := n.state.Address

	if n.blobs, err = blob.Open(l.BlobDir()); err != nil {
		return nil, err
	}
	// This process holds the data dir: a temp file there is a store a
	// killed predecessor never finished (up to a module's or 1 MiB input's size).
	if swept, err := n.blobs.SweepTemp(); err != nil {
		n.log.Warn("could not remove unfinished blob writes", "err", err)
	} else if swept > 0 {
		n.log.Info("removed unfinished blob writes of a previous run", "files", swept)
	}
	n.slots = cfg.WasmSlots
	if n.slots <= 0 {
		n.slots = defaultWasmSlots()
	}
	cacheDir := cfg.WasmCacheDir
	if cacheDir == "" {
		cacheDir = l.WasmCacheDir()
	}
	if n.wasm, err = wasm.New(ctx, wasm.Config{CacheDir: cacheDir, MaxConcurrent: n.slots, HostCallTimeout: cfg.HostCallTimeout, Logger: n.log}); err != nil {
		return nil, fmt.Errorf("start wasm runtime: %w", err)
	}
	n.startBrowser(ctx, false)
	if err := n.openStore(); err != nil {
		return nil, err
	}
	// A node removed from the cluster and started again on its old data
	// dir is refused while it joins and catches up (a removed first node
	// has no join: it waits for a quorum it never gets): say so while it
	// tries, not only raft's dial errors. The watcher Start runs later
	// takes over once it serves.
	refCtx, stopRefWatch := context.WithCancel(ctx)
	refDone := make(chan struct{})
	go func() { defer close(refDone); n.watchSelfRefused(refCtx, refusedCheckEvery) }()
	stopRefusedWatch := sync.OnceFunc(func() { stopRefWatch(); <-refDone })
	defer stopRefusedWatch()
	// The policy decides API calls and, through the cluster and the blob
	// exchange, the nodes' own work (node_work), from the first peer call.
	if n.authz, err = api.NewAuthorizer(n.store.State(), n.log); err != nil {
		return nil, err
	}
	if err := n.startCluster(ctx); err != nil {
		return nil, err
	}
	n.blobNet = newBlobNet(n.blobs, n.transport, st.NodeID, n.cluster.Members, n.log)
	n.blobNet.alive = n.cluster.Alive
	n.blobNet.allow = func(p identity.Principal) error { return n.authz.NodeWork(p, policy.ActionBlobFetch, "") }
	if err := n.transport.Handle(mesh.TagBlob, n.blobNet.serve); err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel

	n.metrics = newNodeMetrics(n)
	n.worker = worker.New(worker.Config{
		NodeID: st.NodeID, State: n.store.State(), Control: n.cluster, Blobs: n.blobNet,
		Executors: n.executors(), Logger: n.log, OnRun: n.metrics.observeRun,
		Secrets: nodeSecrets{n}, KV: nodeKV{n: n}, Leases: nodeLeases{n},
		KeepEndedOutput: func() bool { return n.cluster.AllSupport(cluster.FeatureEndedOutput) },
		RunHereLimit:    n.runHereLimit(),
		HandBack:        n.takesNoWork,
	})
	n.cluster.SetOutputSource(n.readOutput)
	n.cluster.SetBrowserHandler(n.browserSession)
	// Catch up with the log before Recover, so it sees every placement made
	// on this node before it stopped. Nothing new is placed here meanwhile:
	// the node gossips no capacity until Recover is done (workerReady).
	// No deadline on the catch-up: a node far behind may need a large
	// snapshot installed, and one that gave up after a minute exited, so a
	// supervisor restarted it and the install began again. It waits until
	// it is current or stopped (SIGINT/SIGTERM), saying every 5 s what for.
	if err := n.catchUp(ctx); err != nil {
		return nil, err
	}
	stopRefusedWatch()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := n.worker.Recover(wctx); err != nil {
		return nil, err
	}
	// Now offer the slots: work placed from here on is this process's.
	n.metaMu.Lock()
	n.workerReady = true
	err = n.cluster.SetMeta(wctx, n.meta())
	n.metaMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("offer this node's slots to the cluster: %w", err)
	}
	if !n.state.Joined {
		if err := n.registerInitMembers(wctx); err != nil {
			return nil, err
		}
	}
	n.keeper.step(wctx)
	// Serve the API once the replica is current and the init members are
	// registered, so the first answers are right (no spurious denials).
	n.serve(runCtx, addr, cred)
	n.transport.RefuseAPI(false)
	if n.cfg.MetricsListen != "" {
		if err := n.serveMetrics(runCtx); err != nil {
			if cfg.MetricsListen == "" {
				err = fmt.Errorf("%w (the address recorded in the data dir; choose another with --metrics-listen HOST:PORT, or --metrics-listen off)", err)
			}
			return nil, err
		}
	}
	if err := n.recordMetrics(); err != nil {
		return nil, err
	}
	n.wg.Add(8)
	go func() { defer n.wg.Done(); n.keeper.run(runCtx) }()
	go func() { defer n.wg.Done(); n.runBlobGC(runCtx) }()
	go func() { defer n.wg.Done(); n.releaseMemory(runCtx) }()
	go func() { defer n.wg.Done(); n.authz.Watch(runCtx) }()
	go func() { defer n.wg.Done(); n.watchRevocations(runCtx) }()
	go func() { defer n.wg.Done(); n.renewLoop(runCtx) }()
	go func() { defer n.wg.Done(); n.worker.Run(runCtx) }()
	go func() { defer n.wg.Done(); n.runScheduler(runCtx) }()
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.watchBrowser(runCtx) }()
	go func() { defer n.wg.Done(); n.precompileModules(runCtx) }()
	n.wg.Add(1) // after a restore or recovery only (node.json replicate_blobs)
	go func() { defer n.wg.Done(); n.replicateHeldBlobs(runCtx) }()

	n.metaMu.Lock()
	browserSlots := n.browserSlots
	n.metaMu.Unlock()
	n.log.Info("node ready", "address", addr, "data_dir", l.Dir, "cluster", st.ClusterName,
		"wasm_slots", n.slots, "browser_slots", browserSlots, "browser_prewarm", browserSlots > 0 && n.cfg.BrowserPrewarm,
		"raft", n.store.Stats().State, "ca_keys", len(n.keeper.kr.Fingerprints()), "timers", n.timers.String())
	return n, nil
}

// listen opens the node's one UDP socket.
func (n *Node) listen() error {
	var err error
	n.transport, err = mesh.Listen(mesh.Config{
		ListenAddr:    n.cfg.Listen,
		AdvertiseAddr: n.cfg.Advertise,
		// Callers without a certificate may connect to reach the pairing
		// call only (the API refuses everything else; mesh refuses them on
		// the peer protocol).
		ServerTLS:         identity.LiveServerTLSConfig(n.cred, nil, n.peerCheck, true),
		ClientTLS:         identity.LiveClientTLSConfig(n.cred, nil, n.peerCheck),
		Logger:            n.log,
		StatelessResetKey: n.resetKey(),
		// Until it serves, the node refuses API handshakes: a call it took
		// while joining and catching up (minutes, for a node far behind)
		// waited unanswered; refused, a client tries another node at once.
		RefuseAPI: true,
		// Only nodes speak the peer protocol (gossip, raft, blobs, peer
		// RPC); devices reach the API only.
		PeerFilter: func(cs tls.ConnectionState) error {
			p, err := identity.PeerPrincipal(cs)
			if err != nil {
				return err
			}
			if p.Kind != identity.KindNode {
				return fmt.Errorf("%s is not a node", p)
			}
			return nil
		},
	})
	var le *mesh.ListenError
	if errors.As(err, &le) {
		// It names the address; a restarted node may move.
		return fmt.Errorf("%w; free the port, or move this node with --listen HOST:PORT (its cluster is told the new address)", err)
	}
	if err != nil {
		return fmt.Errorf("listen on %s: %w", n.cfg.Listen, err)
	}
	return n.recordAddress()
}

// listenAddrs picks what a node binds and advertises: the configured
// addresses; else, on a restart, the ones recorded at the last start (so
// the node comes back where its peers and the raft configuration know it);
// else DefaultListen.
func listenAddrs(cfg Config, st State) (listen, advertise string) {
	if cfg.Listen != "" {
		return cfg.Listen, cfg.Advertise
	}
	advertise = cfg.Advertise
	if advertise == "" {
		advertise = st.Advertise
	}
	switch {
	case st.Listen != "":
		return st.Listen, advertise
	case st.Address != "":
		return st.Address, advertise
	}
	return DefaultListen, cfg.Advertise
}

// wildcardAdvertise picks the address to advertise for a wildcard listen
// address (0.0.0.0:PORT, [::]:PORT): the source address of this machine's
// default route, found by connecting a UDP socket, which sends nothing.
// ok is false for a specific listen address or when no route is found.
func wildcardAdvertise(listen string) (string, bool) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", false
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return "", false
	}
	for _, probe := range []string{"192.0.2.1:9", "[2001:db8::1]:9"} {
		c, err := net.Dial("udp", probe)
		if err != nil {
			continue
		}
		local := c.LocalAddr().(*net.UDPAddr).IP
		c.Close()
		if !local.IsUnspecified() && !local.IsLoopback() {
			return net.JoinHostPort(local.String(), port), true
		}
	}
	return "", false
}

// recordAddress writes the addresses this start bound and advertises to
// node.json, and says so when the advertised one changed: the cluster
// knows this node by it, so a change is worth a line in the log.
func (n *Node) recordAddress() error {
	addr, bound := n.transport.AdvertiseAddr(), n.transport.Addr().String()
	old := n.state
	if old.Address == addr && old.Listen == bound && old.Advertise == n.cfg.Advertise {
		return nil
	}
	if old.Address != "" && old.Address != addr {
		n.log.Warn("this node's address changed; it tells the cluster its new one when it rejoins",
			"old_address", old.Address, "address", addr,
			"hint", "restart without --listen to keep the recorded address")
	}
	n.state.Address, n.state.Listen, n.state.Advertise = addr, bound, n.cfg.Advertise
	if err := n.layout.WriteState(n.state); err != nil {
		return fmt.Errorf("record address: %w", err)
	}
	return nil
}

// openStore opens raft. Only the node that created the cluster bootstraps;
// a joined node starts empty and is added by the leader.
func (n *Node) openStore() error {
	sc := consensus.Config{
		Dir: n.layout.RaftDir(), NodeID: n.state.NodeID, Advertise: n.state.Address,
		Layer:     cluster.NodeOnlyLayer(n.transport.RaftLayer(), n.log),
		Bootstrap: !n.state.Joined, Logger: n.log,
	}
	sc.Tune = n.timers.tuneRaft
	sc.Refused = &n.refused
	store, err := consensus.Open(sc)
	if err != nil {
		return err
	}
	n.storeMu.Lock()
	n.store = store
	n.storeMu.Unlock()
	return nil
}

// startCluster starts gossip and, on a joined node's first start, joins.
func (n *Node) startCluster(ctx context.Context) error {
	n.labels = n.keeper.labels(n.store.State().Trust())
	c, err := cluster.New(cluster.Config{
		NodeID: n.state.NodeID, Advertise: n.state.Address, Transport: n.transport, Store: n.store,
		Meta:         n.meta(),
		TargetVoters: n.cfg.TargetVoters, Fast: n.cfg.Fast, Tuning: n.timers.Gossip, Logger: n.log,
		CAKeys: n.keeper.handOff, NodeWork: n.authz.NodeWork, NodeWorkOn: n.authz.NodeWorkOn,
	})
	if err != nil {
		return err
	}
	n.cluster = c
	n.clusterRef.Store(c)
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("start gossip: %w", err)
	}
	if seeds := n.joinSeeds(); len(seeds) > 0 {
		jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := c.Join(jctx, seeds); err != nil {
			if refused, why, msg := n.selfRefused(); refused {
				return fmt.Errorf("join the cluster via %v: %s (%s): %w", seeds, msg, why, err)
			}
			return fmt.Errorf("join the cluster via %v: %w", seeds, err)
		}
	}
	return nil
}

// joinSeeds are the addresses a joined node contacts at start: the other
// servers of its raft configuration (the members it last knew), then the
// seeds it first joined through. A node restarted after the node it joined
// through was removed for good (the first node, say) tried only that one,
// for two minutes, and exited: it could never start again.
func (n *Node) joinSeeds() []string {
	if !n.state.Joined || len(n.state.Seeds) == 0 {
		return nil
	}
	seeds := n.cluster.KnownPeers()
	for _, s := range n.state.Seeds {
		if !slices.Contains(seeds, s) {
			seeds = append(seeds, s)
		}
	}
	return seeds
}

// meta is what this node gossips: its configured labels plus the CA's
// (n.labels), capacity and version. The caller holds metaMu or is Start.
func (n *Node) meta() cluster.Meta {
	labels := map[string]string{}
	for k, v := range n.cfg.Labels {
		labels[k] = v
	}
	for k, v := range n.labels {
		labels[k] = v
	}
	capacity := map[string]int{}
	if n.workerReady {
		capacity = n.capacity()
	}
	return cluster.Meta{Labels: labels, Capacity: capacity, Version: n.cfg.Version}
}

// setLabels replaces the CA's gossip labels (api.LabelCAKeys,
// api.LabelCertRoot) and spreads them.
func (n *Node) setLabels(ctx context.Context, l map[string]string) error {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	n.labels = l
	return n.cluster.SetMeta(ctx, n.meta())
}

// serve starts the HTTP/3 API on the transport's API connections.
func (n *Node) serve(ctx context.Context, addr string, cred *identity.Credential) {
	info := api.Info{NodeID: n.state.NodeID, Address: addr, ClusterName: n.state.ClusterName,
		CAFingerprint: fingerprint(cred), Version: n.cfg.Version, Started: time.Now(), TargetVoters: n.cfg.TargetVoters}
	opts := api.Options{Control: apiControl{n.cluster}, Live: n.cluster, Browsers: n.cluster, Metrics: n.metrics.Text, Blobs: n.blobNet, Artifacts: n.blobNet, Validator: n.wasm, Authz: n.authz,
		CertTTL: n.cfg.CertTTL, Info: info, Logger: n.log, Members: n.members, Progress: n.cluster.Progress, Leave: n.leave,
		Peers: n.peerAddrs, LeaderChanges: n.cluster.LeaderChanges, Forward: n.viaSigners, Seal: n.sealSecret, DataKey: n.dataKey, Issuer: n.keeper, Snapshots: n, RunHere: runHere{n}}
	n.http = &http3.Server{Handler: api.New(opts).Handler(), Logger: n.log}
	conns := n.transport.APIConns()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
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
	}()
}

func fingerprint(c *identity.Credential) string {
	if len(c.RootCerts) == 0 {
		return ""
	}
	sum := sha256.Sum256(c.RootCerts[0].Raw)
	return hex.EncodeToString(sum[:])
}

// apply commits a command through the leader.
func (n *Node) apply(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error) {
	return n.cluster.Apply(ctx, cmd)
}

// members lists the cluster's nodes for the API.
func (n *Node) members() []cluster.Member { return n.cluster.Members() }

// peerAddrs are the live node addresses a joiner should contact.
func (n *Node) peerAddrs() []string {
	var out []string
	for _, m := range n.cluster.Members() {
		if m.State == cluster.StateAlive {
			out = append(out, m.Address)
		}
	}
	return out
}

// leave leaves the cluster gracefully, then stops the node's Run.
//
// From then on the node is one that joins: node.json records it as joined
// with the others as its seeds, so started again on its data dir it asks
// to come back. The node that made the cluster (or a restored one) has no
// seeds and never joined; it used to wait outside raft for good, as the
// leader does not add a node that left back from gossip for ten dead-server
// graces, and its own log may still name it a voter (the leader stops
// replicating to a server once it removes it).
func (n *Node) leave(ctx context.Context) error {
	peers := n.cluster.KnownPeers()
	if err := n.cluster.Leave(ctx); err != nil {
		return err
	}
	if len(peers) > 0 {
		err := n.updateState(func(st *State) {
			for _, s := range st.Seeds {
				if !slices.Contains(peers, s) {
					peers = append(peers, s)
				}
			}
			st.Joined, st.Seeds = true, peers
		})
		if err != nil {
			n.log.Warn("left the cluster, but could not record it in node.json: started again, this node will not rejoin by itself", "err", err)
		}
	}
	select {
	case <-n.leaveReq:
	default:
		close(n.leaveReq)
	}
	return nil
}

// updateState changes node.json while the node runs: change edits the
// state under stateMu, and the result is written (atomically) before the
// lock is let go, so two changes cannot lose one another.
func (n *Node) updateState(change func(*State)) error {
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	change(&n.state)
	return n.layout.WriteState(n.state)
}

// Addr is the node's QUIC address.
func (n *Node) Addr() string { return n.state.Address }

// ID is the node's id.
func (n *Node) ID() string { return n.state.NodeID }

// Layout is the node's data-dir layout.
func (n *Node) Layout() Layout { return n.layout }

// Cluster is the node's membership view (for tests and benchmarks).
func (n *Node) Cluster() *cluster.Cluster { return n.cluster }

// Close stops the node: it gossips that it is stopping (announceStop), a
// leader hands leadership over (handOff), then API, worker and scheduler, gossip, raft, transport.
// Each stage is bounded (closeStage): a part that does not stop in time is
// logged by name and left behind, so stopping a node never hangs.
func (n *Node) Close() error {
	var err error
	n.closed.Do(func() {
		began := time.Now()
		if n.log == nil { // a Start that failed before it had a logger
			n.log = slog.New(slog.DiscardHandler)
		}
		n.log.Info("stopping")
		defer func() {
			if err != nil {
				n.log.Warn("stopped, with errors", "took", time.Since(began).Round(time.Millisecond), "err", err)
				return
			}
			n.log.Info("stopped", "took", time.Since(began).Round(time.Millisecond))
		}()
		n.announceStop()
		n.handOff()
		offered := n.withdrawSlots()
		if n.cancel != nil {
			n.cancel()
		}
		if n.http != nil {
			n.http.Close()
		}
		if n.caCl.tr != nil {
			n.caCl.tr.Close()
		}
		stopped := n.closeStage("the worker, scheduler and background loops", 30*time.Second, func() error { n.wg.Wait(); return nil })
		err = errors.Join(err, stopped)
		if stopped == nil && offered {
			n.handBack()
		}
		if n.cluster != nil {
			err = errors.Join(err, n.closeStage("gossip and cluster loops", 20*time.Second, n.cluster.Close))
		}
		if n.store != nil {
			// Raft's shutdown waits for its replication goroutines; one
			// blocked on a peer that vanished mid-RPC is released by
			// closing the transport, so bound the wait and then do that.
			done := make(chan error, 1)
			go func() { done <- n.store.Close() }()
			select {
			case e := <-done:
				err = errors.Join(err, e)
			case <-time.After(5 * time.Second):
				n.log.Warn("raft shutdown is slow; closing the transport to release it")
				if n.transport != nil {
					n.transport.Close()
				}
				err = errors.Join(err, n.closeStage("raft", 20*time.Second, func() error { return <-done }))
			}
		}
		if n.keeper != nil {
			err = errors.Join(err, n.keeper.kr.Close())
		}
		if n.wasm != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err = errors.Join(err, n.wasm.Close(ctx))
			cancel()
		}
		if n.browser != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err = errors.Join(err, n.browser.Close(ctx))
			cancel()
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

// announceStop is Close's first stage: it gossips that this node is
// stopping cleanly (cluster.Stopping), so the others list it as stopped
// rather than dead once it is gone; they treat it as dead all the same.
func (n *Node) announceStop() {
	if n.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := n.cluster.Stopping(ctx); err != nil {
		n.log.Debug("stopping: could not gossip that this node stops cleanly", "err", err)
	}
}

// handOffWait bounds how long a stopping leader spends handing leadership
// over: raft gives up after about two election timeouts (0.6 s with LAN
// timers, 4 s with WAN ones), so this is a backstop.
const handOffWait = 5 * time.Second

// handOff is Close's second stage: a node stopping cleanly while it leads
// hands leadership to a live voter (cluster.HandOff), with its API, worker
// and peer RPC still serving, so the writes in flight get their answers and
// the others need not wait out an election timeout before they can write.
// A failed transfer is logged, and the node stops anyway.
func (n *Node) handOff() {
	if n.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handOffWait)
	defer cancel()
	if err := n.cluster.HandOff(ctx); err != nil {
		n.log.Warn("stopping without handing leadership over; the other voters elect a leader once their election timeout passes", "err", err)
	}
}

// withdrawSlots is Close's stage before the worker stops: the node gossips
// that it offers no slots, so the scheduler places nothing more here and
// the jobs handBack queues again go elsewhere. It waits (at most a second)
// until the news has left this node. It reports whether the node had
// offered slots.
func (n *Node) withdrawSlots() bool {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	if !n.workerReady || n.cluster == nil {
		return false
	}
	n.workerReady = false
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := n.cluster.SetMeta(ctx, n.meta()); err != nil {
		n.log.Debug("stopping: could not gossip that this node takes no more work", "err", err)
	}
	return true
}

// handBackWait bounds how long a stopping node spends handing its jobs
// back (handBack).
const handBackWait = 3 * time.Second

// handBackParallel is how many hand-backs are under way at once.
const handBackParallel = 16

// handBack is Close's stage after the worker stopped its runs (and after
// withdrawSlots, so the scheduler no longer places work here): the jobs
// the cluster still records as running here (started or held for a slot)
// are queued again at once, so they run elsewhere now rather than once
// the cluster has noticed this node gone (seconds) or it starts again. A
// job whose result committed meanwhile is left alone (stale attempt). A
// node with no leader, or one that never offered its slots, hands nothing
// back: the next start's Recover, or the leader's failure detection,
// does it as before.
func (n *Node) handBack() {
	if n.cluster == nil || n.store == nil {
		return
	}
	if _, leader := n.store.Leader(); leader == "" {
		return
	}
	jobs := n.store.State().RunningOn(n.state.NodeID)
	if len(jobs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handBackWait)
	defer cancel()
	// Several at a time (a node may hold slots × 32 array tasks): one by
	// one, each waiting for its commit, a few hundred outlasted the wait.
	var mu sync.Mutex
	handed, left := 0, 0
	sem := make(chan struct{}, handBackParallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := n.apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RequeueJob{RequeueJob: &raftpb.RequeueJob{
				Id: j.ID, Attempt: j.Attempt, Reason: "node " + n.state.NodeID + " stopped", NodeId: n.state.NodeID, AtMs: time.Now().UnixMilli()}}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				handed++
			case errors.Is(err, consensus.ErrStaleAttempt) || errors.Is(err, consensus.ErrNotFound):
			default:
				left++
			}
		})
	}
	wg.Wait()
	if left > 0 {
		n.log.Warn("stopping: could not queue every running job again; the rest move once the cluster sees this node gone, or when it starts again",
			"queued_again", handed, "left", left)
		return
	}
	n.log.Info("stopping: queued this node's running jobs again, to run elsewhere", "jobs", handed)
}

// closeStage runs one stage of Close, waiting for it at most limit; a
// stage still running then is logged by name, left to finish on its own,
// and reported in Close's error.
func (n *Node) closeStage(what string, limit time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		n.log.Error("stopping the node: a part did not stop in time; going on without it", "part", what, "waited", limit)
		return fmt.Errorf("stopping %s: still running after %v", what, limit)
	}
}

// SetFault installs a network fault on this node's transport (tests: drop
// everything to and from the peers for which f returns true).
func (n *Node) SetFault(f mesh.FaultFunc) { n.transport.SetFault(f) }

// RunningJobs is how many runs this node's worker has in progress.
func (n *Node) RunningJobs() int { return n.worker.Running() }

// maxOutputChunk bounds the bytes of each stream one live output read
// returns.
const maxOutputChunk = 256 << 10

// readOutput serves a read of a job's live output from this node's worker.
func (n *Node) readOutput(ctx context.Context, r *peerpb.JobOutputRequest) *peerpb.JobOutputResponse {
	tap, attempt, ok := n.worker.Output(r.JobId)
	if !ok {
		return &peerpb.JobOutputResponse{}
	}
	var started int64
	if at := tap.Started(); !at.IsZero() {
		started = at.UnixMilli()
	}
	if r.StatusOnly {
		return &peerpb.JobOutputResponse{Found: true, Attempt: attempt, Done: tap.Done(), StartedAtMs: started, ReportsStart: true}
	}
	from := [2]int64{r.StdoutOffset, r.StderrOffset}
	if w := time.Duration(r.WaitMs) * time.Millisecond; w > 0 {
		wctx, cancel := context.WithTimeout(ctx, w)
		tap.Wait(wctx, from)
		cancel()
	}
	chunks, done := tap.Read(from, maxOutputChunk)
	pb := func(c pruntime.Chunk) *peerpb.OutputChunk {
		return &peerpb.OutputChunk{Offset: c.Offset, Data: c.Data, Skipped: c.Skipped}
	}
	return &peerpb.JobOutputResponse{Found: true, Attempt: attempt, Done: done, StartedAtMs: started, ReportsStart: true,
		Stdout: pb(chunks[pruntime.Stdout]), Stderr: pb(chunks[pruntime.Stderr])}
}

// startBrowser starts the browser executor when Chromium is installed and
// browser jobs are not disabled, and reports whether it did (or need not).
// Without it the node advertises no browser capacity until watchBrowser
// finds Chromium.
func (n *Node) startBrowser(ctx context.Context, quiet bool) bool {
	if n.cfg.BrowserSlots < 0 {
		return true
	}
	detect := browser.Detect
	if n.cfg.DetectBrowser != nil {
		detect = n.cfg.DetectBrowser
	}
	path, ok := detect()
	if !ok {
		if !quiet {
			n.log.Info("no Chromium found: this node runs no browser jobs until one is installed (" + browser.InstallHint + "; it is noticed within " + browserRedetect.String() + ", no restart needed)")
		}
		return false
	}
	slots := n.cfg.BrowserSlots
	if slots == 0 {
		slots = defaultBrowserSlots
	}
	ex, err := browser.New(ctx, browser.Config{ExecPath: path, Slots: slots, Logger: n.log, ProfileDir: n.layout.BrowserDir(), SessionIdleTTL: n.cfg.BrowserSessionIdleTTL, Prewarm: n.cfg.BrowserPrewarm})
	if err != nil {
		if !quiet {
			n.log.Warn("browser executor did not start; this node runs no browser jobs", "err", err)
		}
		return false
	}
	n.metaMu.Lock()
	n.browser = ex
	n.browserSlots = slots
	n.metaMu.Unlock()
	return true
}

// browserRedetect is how often a node without Chromium looks for it again.
const browserRedetect = 10 * time.Second

// watchBrowser looks for Chromium every browserRedetect while this node has
// no browser executor; once found, the worker runs browser jobs and the
// node gossips its browser capacity, without a restart.
func (n *Node) watchBrowser(ctx context.Context) {
	n.metaMu.Lock()
	have := n.browser != nil
	n.metaMu.Unlock()
	if have || n.cfg.BrowserSlots < 0 {
		return
	}
	every := browserRedetect
	if n.cfg.Fast {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !n.startBrowser(ctx, true) {
			continue
		}
		n.metaMu.Lock()
		ex := n.browser
		n.metaMu.Unlock()
		n.worker.AddExecutor(pruntime.KindBrowser, ex)
		n.metaMu.Lock()
		err := n.cluster.SetMeta(ctx, n.meta())
		n.metaMu.Unlock()
		if err != nil {
			n.log.Warn("Chromium found, but the new browser capacity is not gossiped yet", "err", err)
		}
		n.log.Info("Chromium found: this node now runs browser jobs", "slots", n.browserSlots)
		return
	}
}

// capacity is what the node advertises to the scheduler.
func (n *Node) capacity() map[string]int {
	c := map[string]int{string(pruntime.KindWasm): n.slots}
	if n.browser != nil {
		c[string(pruntime.KindBrowser)] = n.browserSlots
	}
	return c
}

func (n *Node) executors() map[pruntime.Kind]pruntime.Executor {
	ex := map[pruntime.Kind]pruntime.Executor{pruntime.KindWasm: n.wasm}
	if n.browser != nil {
		ex[pruntime.KindBrowser] = n.browser
	}
	return ex
}

// catchUp waits until this node's replica is current: a leader is known
// and the local state has applied everything committed before now. After
// a restart it can take a few heartbeats for the leader to reach us, so it
// keeps trying until ctx ends, saying what it waits for.
func (n *Node) catchUp(ctx context.Context) error {
	next := time.Now()
	for {
		err := n.cluster.VerifyRead(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("catching up with the cluster: %w (last error: %v)", ctx.Err(), err)
		}
		if time.Now().After(next) {
			n.log.Info("waiting for the cluster (a leader and a quorum) before taking work", "err", err)
			next = time.Now().Add(5 * time.Second)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// resetKey derives this node's QUIC stateless-reset key from the cluster
// data key and the node id: stable across restarts (so peers learn at once
// that a restarted node lost its connections, instead of waiting for an
// idle timeout) and secret (the data key never leaves the nodes).
func (n *Node) resetKey() *quic.StatelessResetKey {
	if len(n.dataKey) == 0 {
		return nil
	}
	h := sha256.New()
	h.Write([]byte("palyra-quic-stateless-reset-v1\x00"))
	h.Write(n.dataKey)
	h.Write([]byte(n.state.NodeID))
	var k quic.StatelessResetKey
	copy(k[:], h.Sum(nil))
	return &k
}

// apiControl gives the API the cluster with a narrow view of the state.
type apiControl struct{ *cluster.Cluster }

func (c apiControl) State() api.State { return c.Cluster.State() }
