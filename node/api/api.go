// Package api serves Palyra's node API (palyra.v1 JobService and
// NodeService) as Connect handlers. The node mounts them on an HTTP/3
// server whose QUIC connections are mutually authenticated; the handler
// reads the caller's principal from the verified TLS state on every call.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Limits on what a caller may submit.
const (
	MaxModuleBytes   = 16 << 20
	MaxInputBytes    = 1 << 20
	MaxRequestBytes  = MaxModuleBytes + MaxInputBytes + 64<<10
	DefaultTimeout   = 30 * time.Second
	MaxTimeout       = 24 * time.Hour
	DefaultMemory    = 64 << 20
	MaxMemory        = 4 << 30
	defaultListLimit = 100
	maxListLimit     = 1000
)

// Control is the control-plane surface the API needs.
type Control interface {
	State() *consensus.State
	Apply(ctx context.Context, cmd *raftpb.Command) (consensus.Job, error)
	VerifyLeader(ctx context.Context) error
	Leader() (addr, id string)
	Stats() consensus.Stats
}

// Blobs stores module bytes content-addressed.
type Blobs interface {
	Put(data []byte) (string, error)
}

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
}

// Server implements the palyra.v1 services.
type Server struct {
	control   Control
	blobs     Blobs
	validator Validator
	info      Info
	log       *slog.Logger
	now       func() time.Time
}

// New returns a Server.
func New(control Control, blobs Blobs, validator Validator, info Info, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{control: control, blobs: blobs, validator: validator, info: info,
		log: log.With("component", "api"), now: time.Now}
}

// Handler returns the HTTP handler serving every service. Requests without
// a verified client certificate are refused before any handler runs.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(MaxRequestBytes)}
	mux.Handle(palyrav1connect.NewJobServiceHandler(jobService{s}, opts...))
	mux.Handle(palyrav1connect.NewNodeServiceHandler(nodeService{s}, opts...))
	return s.authenticate(mux)
}

type principalKey struct{}

// authenticate derives the caller's principal from the verified TLS state.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "mutual TLS required", http.StatusUnauthorized)
			return
		}
		p, err := identity.PeerPrincipal(*r.TLS)
		if err != nil {
			http.Error(w, "unauthenticated: "+err.Error(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// PrincipalFrom returns the authenticated caller of a request context.
func PrincipalFrom(ctx context.Context) (identity.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(identity.Principal)
	return p, ok
}

func newJobID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return "j-" + hex.EncodeToString(b[:])
}

// readInfo performs a linearizable read barrier and describes it.
func (s *Server) readInfo(ctx context.Context) (*palyrav1.ReadInfo, error) {
	if err := s.control.VerifyLeader(ctx); err != nil {
		return nil, fromErr(err)
	}
	return &palyrav1.ReadInfo{Linearizable: true, AppliedIndex: s.control.State().AppliedIndex(), ServedBy: s.info.NodeID}, nil
}

func mib(n int) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// nodeService ---------------------------------------------------------------

type nodeService struct{ s *Server }

func (n nodeService) Status(ctx context.Context, _ *connect.Request[palyrav1.StatusRequest]) (*connect.Response[palyrav1.StatusResponse], error) {
	s := n.s
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
	return connect.NewResponse(&palyrav1.StatusResponse{
		NodeId: s.info.NodeID, Address: s.info.Address, LeaderId: lid, LeaderAddress: laddr,
		Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, RaftState: st.State,
		JobsByPhase: counts, Version: s.info.Version, ClusterName: s.info.ClusterName,
		CaFingerprint: s.info.CAFingerprint, Caller: caller.String(),
		UptimeMs: s.now().Sub(s.info.Started).Milliseconds(),
	}), nil
}
