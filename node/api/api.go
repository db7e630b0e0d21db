// Package api serves Palyra's node API (palyra.v1 JobService and
// NodeService) as Connect handlers. The node mounts them on an HTTP/3
// server whose QUIC connections are mutually authenticated; the handler
// reads the caller's principal from the verified TLS state on every call.
package api

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Limits on what a caller may submit.
const (
	MaxModuleBytes     = palyrav1.MaxModuleBytes
	MaxInputBytes      = palyrav1.MaxInputBytes      // per job, and per task of an array
	MaxArrayInputBytes = palyrav1.MaxArrayInputBytes // an array request's inputs, all tasks together
	// MaxRequestBytes is the largest request: a module, an array's inputs,
	// and the framing of up to a million inputs.
	MaxRequestBytes = MaxModuleBytes + MaxArrayInputBytes + 8<<20
	DefaultTimeout  = time.Duration(palyrav1.DefaultTimeoutMs) * time.Millisecond
	MaxTimeout      = 24 * time.Hour
	DefaultMemory   = palyrav1.DefaultMemoryBytes
	MaxMemory       = 4 << 30
	MaxOutputLimit  = 16 << 20
	MaxRetries      = 10
	// DefaultMaxQueued bounds the queue: past it submissions are refused
	// (back-pressure) instead of growing memory without bound. Job arrays
	// queue one job per task, so the bound is a million: a 100,000-task
	// array fits several times over, and a queued job without inline input
	// costs a few hundred bytes of FSM memory on every node (about 0.5 GiB
	// at the bound).
	DefaultMaxQueued = 1_000_000
	defaultListLimit = 100
	maxListLimit     = 1000
)

// Control is the control-plane surface the API needs.
type Control interface {
	State() State
	Apply(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error)
	// VerifyRead makes the local replica linearizable for a read that follows.
	VerifyRead(ctx context.Context) error
	Leader() (addr, id string)
	Stats() consensus.Stats
	// AllSupport reports whether every member runs software with feature
	// (cluster.Feature…): a rolling upgrade has old and new nodes.
	AllSupport(feature string) bool
	// SeenSupport is AllSupport leaving out raft servers this node has
	// never heard from (down since it started).
	SeenSupport(feature string) bool
	// Lacking names the members AllSupport finds without feature.
	Lacking(feature string) []string
}

// Blobs stores modules and large job inputs content-addressed.
type Blobs interface {
	// Put stores data and returns its hash once another node holds it too
	// (when another node is alive).
	Put(data []byte) (string, error)
	// Get returns a blob's verified bytes, from this node or a peer.
	Get(hash string) ([]byte, error)
	// Locate ensures a blob the cluster holds is available and replicated.
	Locate(hash string) error
}

// validatedModules bounds the memory of module hashes that passed
// validation on this node (a few hundred KiB at most).
const validatedModules = 4096

// Validator checks a wasm module at submit time.
type Validator interface {
	Validate(ctx context.Context, module []byte) error
}

// Info describes the serving node for Status.
type Info struct {
	NodeID        string
	Address       string
	ClusterName   string
	CAFingerprint string
	Version       string
	Started       time.Time
	// TargetVoters is how many raft voters this node keeps when it leads
	// (its --target-voters): what 'palyra status' compares the voters with.
	TargetVoters int
}

// Issuer is the cluster CA as this node sees it. Every node has the trust
// bundle; only a node holding the key of the active root (a voter) signs.
// Elsewhere CanSign is false, Sign fails with identity.ErrNoSigner, and the
// API relays pairing and renewal to a node that can (Options.Forward).
type Issuer interface {
	CanSign() bool
	// Sign issues a certificate for p under the active root: the leaf, then
	// any intermediate peers need (a cross-certificate during a rotation).
	Sign(ctx context.Context, csrDER []byte, p identity.Principal, ttl time.Duration) ([]*x509.Certificate, error)
	// Roots is the trust bundle, the active root first.
	Roots() []*x509.Certificate
	// Fingerprint names the active root (what new pairing codes pin).
	Fingerprint() string
}

// Options are a Server's collaborators.
type Options struct {
	Control Control
	// Live reads running jobs' output from their workers (job logs).
	Live LiveOutput
	// Browsers relays browser-session calls to workers.
	Browsers Browsers
	// Metrics renders the node's Prometheus metrics.
	Metrics   func() ([]byte, error)
	Blobs     Blobs
	Validator Validator
	// Artifacts fetches blobs from this node or its peers: artifacts, and
	// the inputs and outputs of jobs that were stored as blobs.
	Artifacts interface {
		Get(hash string) ([]byte, error)
	}
	Authz   *Authorizer
	Issuer  Issuer
	Limiter *pairing.Limiter
	Peers   func() []string // node addresses a joiner should contact
	// LeaderChanges says how often this node saw a new leader in the last
	// hour and since when the current one leads (Status).
	LeaderChanges func(now time.Time) (changes int, since time.Time)
	Members       func() []cluster.Member
	// Progress asks the live raft servers how far along they are (nil:
	// node lists go without it).
	Progress func(ctx context.Context) map[string]cluster.ServerProgress
	Leave    func(ctx context.Context) error
	// Forward calls fn with identity clients of nodes that can sign (hold
	// the active CA key), one after another until fn succeeds or fails with
	// an error that another node would repeat; it returns fn's last error.
	// Pairing and renewal through a node that cannot sign go this way.
	Forward func(ctx context.Context, fn func(context.Context, palyrav1connect.IdentityServiceClient) error) error
	// Seal encrypts a secret's value with the cluster data key.
	Seal func(name string, value []byte) ([]byte, error)
	// DataKey is given to nodes that pair (never to devices).
	DataKey []byte
	// Snapshots makes cluster snapshots (nil: SaveSnapshot is refused).
	Snapshots Snapshotter
	CertTTL   time.Duration
	// MaxQueued bounds queued jobs (default DefaultMaxQueued).
	MaxQueued int
	// RunHere runs a short job submitted through RunJob on this node at
	// once, recorded with its result in one entry (nil: never; runhere.go).
	RunHere RunHerer
	Info    Info
	Logger  *slog.Logger
}

// Server implements the palyra.v1 services.
type Server struct {
	Options
	peers     peerCache
	control   Control
	blobs     Blobs
	validator Validator
	authz     *Authorizer
	info      Info
	log       *slog.Logger
	now       func() time.Time
	// validated holds hashes of modules this node validated, so a by-hash
	// submission of a known module neither reads nor validates it again.
	validated *blob.LRU[struct{}]
	// updateHoldoff replaces updateHoldoff when set (tests).
	updateHoldoff time.Duration
}

func (s *Server) holdoff() time.Duration {
	if s.updateHoldoff > 0 {
		return s.updateHoldoff
	}
	return updateHoldoff
}

// New returns a Server.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Limiter == nil {
		o.Limiter = pairing.NewLimiter(pairing.LimiterConfig{})
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = DefaultMaxQueued
	}
	if o.CertTTL == 0 {
		o.CertTTL = 24 * time.Hour
	}
	return &Server{Options: o, control: o.Control, blobs: o.Blobs, validator: o.Validator, authz: o.Authz,
		info: o.Info, log: o.Logger.With("component", "api"), now: time.Now,
		validated: blob.NewLRU[struct{}](validatedModules)}
}

// Handler returns the HTTP handler serving every service. Requests without
// a verified client certificate reach only IdentityService.Pair.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// Small messages go uncompressed: gzip costs more CPU than the bytes
	// it saves on a LAN (it was ~6% of a node's CPU under load).
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(MaxRequestBytes), connect.WithCompressMinBytes(compressMinBytes)}
	mux.Handle(palyrav1connect.NewJobServiceHandler(jobService{s}, opts...))
	mux.Handle(palyrav1connect.NewNodeServiceHandler(nodeService{s}, opts...))
	mux.Handle(palyrav1connect.NewIdentityServiceHandler(identityService{s}, opts...))
	mux.Handle(palyrav1connect.NewPolicyServiceHandler(policyService{s}, opts...))
	mux.Handle(palyrav1connect.NewSecretServiceHandler(secretService{s}, opts...))
	mux.Handle(palyrav1connect.NewKVServiceHandler(kvService{s}, opts...))
	mux.Handle(palyrav1connect.NewSnapshotServiceHandler(snapshotService{s}, opts...))
	mux.Handle(palyrav1connect.NewBrowserServiceHandler(browserService{s}, opts...))
	mux.Handle(palyrav1connect.NewSkillServiceHandler(skillService{s}, opts...))
	mux.Handle(palyrav1connect.NewApprovalServiceHandler(approvalService{s}, opts...))
	mux.Handle(palyrav1connect.NewAuditServiceHandler(auditService{s}, opts...))
	mux.Handle(palyrav1connect.NewHookServiceHandler(hookService{s}, opts...))
	return s.authenticate(mux)
}

type principalKey struct{}

type peerChainKey struct{}

// peerChain returns the certificates the caller presented (leaf first).
func peerChain(ctx context.Context) []*x509.Certificate {
	c, _ := ctx.Value(peerChainKey{}).([]*x509.Certificate)
	return c
}

// authenticate derives the caller's principal from the verified TLS state
// and refuses revoked principals on every request (their connections may
// predate the revocation). Callers without a certificate reach only Pair.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "mutual TLS required", http.StatusUnauthorized)
			return
		}
		if !identity.Authenticated(*r.TLS) {
			if r.URL.Path != palyrav1connect.IdentityServicePairProcedure {
				http.Error(w, "unauthenticated: only pairing is open without a cluster certificate; pair with 'palyra device pair'", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		id, err := s.peers.identify(*r.TLS)
		if err != nil {
			http.Error(w, "unauthenticated: "+err.Error(), http.StatusUnauthorized)
			return
		}
		p := id.principal
		if s.control.State().IsRevoked(string(p.Kind), p.ID) || s.control.State().IsSerialRevoked(id.serial) {
			http.Error(w, fmt.Sprintf("unauthenticated: %s has been revoked; pair again with a new code", p), http.StatusUnauthorized)
			return
		}
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		growStack()
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, peerChainKey{}, r.TLS.PeerCertificates)))
	})
}

// PrincipalFrom returns the authenticated caller of a request context.
func PrincipalFrom(ctx context.Context) (identity.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(identity.Principal)
	return p, ok
}

// compressMinBytes is the smallest message the API compresses.
const compressMinBytes = 64 << 10

func newJobID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return "j-" + hex.EncodeToString(b[:])
}

// readInfo makes a read linearizable (unless stale) and describes it.
// Its no-quorum error does not offer --stale: see staleableRead.
func (s *Server) readInfo(ctx context.Context, stale bool) (*palyrav1.ReadInfo, error) {
	return s.read(ctx, stale, false)
}

// staleableRead is readInfo for a request that carries a stale option
// (job get and list, kv get and list, audit list): when no quorum
// confirms the replica, its error says how to read it anyway. Requests
// without the option (a watch, a log stream, a snapshot, a write) must
// not suggest a flag that changes nothing for them.
func (s *Server) staleableRead(ctx context.Context, stale bool) (*palyrav1.ReadInfo, error) {
	return s.read(ctx, stale, true)
}

func (s *Server) read(ctx context.Context, stale, offerStale bool) (*palyrav1.ReadInfo, error) {
	if stale {
		return &palyrav1.ReadInfo{AppliedIndex: s.control.State().AppliedIndex(), ServedBy: s.info.NodeID}, nil
	}
	if err := s.control.VerifyRead(ctx); err != nil {
		if offerStale {
			err = withStaleHint(err)
		}
		return nil, fromErr(err)
	}
	return &palyrav1.ReadInfo{Linearizable: true, AppliedIndex: s.control.State().AppliedIndex(), ServedBy: s.info.NodeID}, nil
}

// staleHint is what a no-quorum read that can be stale adds to its hint.
const staleHint = "to read this node's replica anyway (it may lag), add --stale"

// withStaleHint adds staleHint to a no_quorum error; others pass unchanged.
func withStaleHint(err error) error {
	var ce *consensus.Error
	if !errors.As(err, &ce) || ce.Code != consensus.ErrNoQuorum.Code {
		return err
	}
	hint := staleHint
	if ce.Hint != "" {
		hint = ce.Hint + "; " + staleHint
	}
	return &consensus.Error{Code: ce.Code, Message: ce.Message, Hint: hint}
}

// mib is a size in MiB; one that is not a whole number of MiB carries its
// bytes too, so a size just over a limit does not read as the limit
// ("input is 1.0 MiB; the limit is 1.0 MiB").
func mib(n int) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}

// nodeService ---------------------------------------------------------------

type nodeService struct{ s *Server }

func (n nodeService) Status(ctx context.Context, _ *connect.Request[palyrav1.StatusRequest]) (*connect.Response[palyrav1.StatusResponse], error) {
	s := n.s
	if err := s.authz.Check(ctx, policy.ActionNodeStatus, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	st := s.control.Stats()
	laddr, lid := s.control.Leader()
	counts := make(map[string]uint64)
	for _, p := range consensus.AllPhases {
		counts[p.String()] = 0
	}
	for p, c := range s.control.State().CountByPhase() {
		counts[p.String()] = c
	}
	caller, _ := PrincipalFrom(ctx)
	var changes int
	var since time.Time
	if s.LeaderChanges != nil {
		changes, since = s.LeaderChanges(s.now())
	}
	var sinceMS int64
	if !since.IsZero() {
		sinceMS = since.UnixMilli()
	}
	return connect.NewResponse(&palyrav1.StatusResponse{
		LeaderChangesLastHour: uint32(changes), LeaderSinceMs: sinceMS,
		NodeId: s.info.NodeID, Address: s.info.Address, LeaderId: lid, LeaderAddress: laddr,
		Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, RaftState: st.State,
		JobsByPhase: counts, Version: s.info.Version, ClusterName: s.info.ClusterName,
		CaFingerprint: s.caFingerprint(), Caller: caller.String(),
		UptimeMs:    s.now().Sub(s.info.Started).Milliseconds(),
		RetentionMs: s.control.State().Retention(), PrunedBeforeMs: s.control.State().PrunedBefore(),
		Peers: s.clusterPeers(),
	}), nil
}

// clusterPeers lists the addresses a client may fail over to: raft
// servers (a node down for now is still one) and alive members, but not
// nodes that left or were removed.
func (s *Server) clusterPeers() []string {
	if s.Members == nil {
		return []string{s.info.Address}
	}
	var out []string
	for _, m := range s.Members() {
		if m.State == cluster.StateLeft || m.Address == "" || s.control.State().IsRevoked("node", m.ID) {
			continue
		}
		if m.InRaft || m.State == cluster.StateAlive {
			out = append(out, m.Address)
		}
	}
	return out
}

// progressTimeout bounds how long a node list waits for the raft servers'
// progress (and so does half the caller's deadline).
const progressTimeout = time.Second

func (n nodeService) ListNodes(ctx context.Context, req *connect.Request[palyrav1.ListNodesRequest]) (*connect.Response[palyrav1.ListNodesResponse], error) {
	s := n.s
	if err := s.authz.Check(ctx, policy.ActionNodeList, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	resp := &palyrav1.ListNodesResponse{ServedBy: s.info.NodeID, TargetVoters: uint32(max(0, s.info.TargetVoters))}
	if s.Members == nil {
		return connect.NewResponse(resp), nil
	}
	var progress map[string]cluster.ServerProgress
	if s.Progress != nil && req.Msg.RaftProgress {
		// A server that does not answer within the bound is shown as
		// unknown rather than holding the list.
		d := progressTimeout
		if dl, ok := ctx.Deadline(); ok && time.Until(dl)/2 < d {
			d = time.Until(dl) / 2
		}
		pctx, cancel := context.WithTimeout(ctx, d)
		progress = s.Progress(pctx)
		cancel()
	}
	for _, m := range s.Members() {
		ni := &palyrav1.NodeInfo{Id: m.ID, Address: m.Address, State: MemberState(s.control.State(), m), Voter: m.Voter, Leader: m.Leader,
			Labels: m.Labels, Version: m.Version, InRaft: m.InRaft, Capacity: map[string]int64{}, Eligible: true, Features: m.Features}
		if rec, ok := s.control.State().Member("node", m.ID); ok {
			ni.Eligible, ni.Draining = !rec.Ineligible && !rec.Draining && !rec.Revoked, rec.Draining
		}
		ni.Running = uint32(len(s.control.State().Jobs(consensus.JobFilter{Phase: consensus.PhaseRunning, NodeID: m.ID})))
		for k, v := range m.Capacity {
			ni.Capacity[k] = int64(v)
		}
		if p, ok := progress[m.ID]; ok && m.InRaft {
			ni.RaftKnown, ni.RaftLastIndex, ni.RaftAppliedIndex = true, p.LastIndex, p.AppliedIndex
			ni.RaftBehind, ni.RaftLagging = p.Behind, p.Lagging
			ni.RaftLastContactMs = p.LastContact.Milliseconds()
			if p.LastContact < 0 {
				ni.RaftLastContactMs = -1
			}
		}
		resp.Nodes = append(resp.Nodes, ni)
	}
	return connect.NewResponse(resp), nil
}

func (n nodeService) Leave(ctx context.Context, _ *connect.Request[palyrav1.LeaveRequest]) (*connect.Response[palyrav1.LeaveResponse], error) {
	s := n.s
	if err := s.authz.Check(ctx, policy.ActionNodeLeave, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if s.Leave == nil {
		return nil, apiError(connect.CodeUnimplemented, "unimplemented", "this node cannot leave", "")
	}
	if err := s.Leave(ctx); err != nil {
		return nil, fromErr(err)
	}
	return connect.NewResponse(&palyrav1.LeaveResponse{}), nil
}

func (n nodeService) SetSchedulable(ctx context.Context, req *connect.Request[palyrav1.SetSchedulableRequest]) (*connect.Response[palyrav1.SetSchedulableResponse], error) {
	s, m := n.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionNodeDrain, policy.ClusterResource(), map[string]any{"target_node": m.NodeId}); err != nil {
		return nil, err
	}
	rec, ok := s.control.State().Member("node", m.NodeId)
	switch {
	case !ok:
		return nil, apiError(connect.CodeNotFound, "not_found", fmt.Sprintf("no node with id %q", m.NodeId), "list nodes with 'palyra nodes'")
	case rec.Revoked:
		// It takes no work whatever its flags say: answering "eligible"
		// for it misled.
		return nil, apiError(connect.CodeFailedPrecondition, "failed_precondition", fmt.Sprintf("node %s was removed from the cluster", m.NodeId),
			"a removed node never takes work again; a machine comes back by joining with a new code ('palyra pair create --kind node')")
	case m.DrainDeadlineMs < 0:
		return nil, invalid(fmt.Sprintf("drain deadline %s is negative", time.Duration(m.DrainDeadlineMs)*time.Millisecond), "give a positive duration, e.g. --deadline 10m, or none to let running work finish")
	}
	now := s.now().UnixMilli()
	cmd := &raftpb.SetNodeSchedulable{Id: m.NodeId, Eligible: m.Eligible && !m.Drain, Draining: m.Drain, AtMs: now}
	if m.Drain && m.DrainDeadlineMs > 0 {
		cmd.DrainDeadlineMs = now + m.DrainDeadlineMs
	}
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SetNodeSchedulable{SetNodeSchedulable: cmd}}); err != nil {
		return nil, fromErr(err)
	}
	return connect.NewResponse(&palyrav1.SetSchedulableResponse{}), nil
}

// Metrics returns the serving node's Prometheus metrics (operators: the
// default policy gives node.list to them alone).
func (n nodeService) Metrics(ctx context.Context, _ *connect.Request[palyrav1.MetricsRequest]) (*connect.Response[palyrav1.MetricsResponse], error) {
	s := n.s
	if err := s.authz.Check(ctx, policy.ActionNodeList, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if s.Metrics == nil {
		return nil, apiError(connect.CodeUnimplemented, "unimplemented", "this node keeps no metrics", "")
	}
	text, err := s.Metrics()
	if err != nil {
		return nil, fromErr(err)
	}
	return connect.NewResponse(&palyrav1.MetricsResponse{Text: string(text), NodeId: s.info.NodeID}), nil
}

// growStack grows the calling goroutine's stack to the size an API call
// ends up needing (32 KiB), in one step while the stack is still shallow.
// Each request runs on a new goroutine (HTTP/3 serves a stream per
// goroutine) that starts small and grew twice on the way down a submit,
// each time copying and re-pointing an ever deeper stack: ~4% of a
// node's CPU per job in 'make bench'. A function with a 16 KiB frame makes
// the runtime double the stack until the frame fits, from here.
//
//go:noinline
func growStack() {
	var frame [16 << 10]byte
	keepFrame(frame[:])
}

// keepFrame keeps growStack's frame from being optimised away.
//
//go:noinline
func keepFrame([]byte) {}

// peerCache remembers, per leaf certificate a caller presented, the
// principal it names and its serial number in decimal: read once per
// certificate instead of on every call (a client sends thousands of
// calls over one connection, and so one certificate). A certificate is
// immutable and the key keeps it alive, so an entry never answers for
// another; revocation is still checked on every call, by principal and
// by this serial.
type peerCache struct {
	mu sync.Mutex
	m  map[*x509.Certificate]peerID
}

// peerID is what a certificate says of its holder.
type peerID struct {
	principal identity.Principal
	serial    string
}

// peerCacheMax bounds the certificates remembered (then it starts again).
const peerCacheMax = 1024

func (c *peerCache) identify(cs tls.ConnectionState) (peerID, error) {
	if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
		_, err := identity.PeerPrincipal(cs)
		return peerID{}, err
	}
	leaf := cs.PeerCertificates[0]
	c.mu.Lock()
	id, ok := c.m[leaf]
	c.mu.Unlock()
	if ok {
		return id, nil
	}
	p, err := identity.PrincipalFromCert(leaf)
	if err != nil {
		return peerID{}, err
	}
	id = peerID{principal: p, serial: leaf.SerialNumber.String()}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= peerCacheMax {
		c.m = make(map[*x509.Certificate]peerID)
	}
	c.m[leaf] = id
	c.mu.Unlock()
	return id, nil
}
