// Package console serves Palyra's web console on the operator's machine:
// a single-page UI, embedded in the binary, and a small JSON API that talks
// to the cluster through the operator's own credential, as 'kubectl proxy'
// and 'nomad ui' do. Nothing is fetched at run time.
//
// It listens on loopback only. A random token, printed once in the URL, is
// single-use: the first visit consumes it and gets an HttpOnly,
// SameSite=Strict cookie holding a different random session value (a URL
// seen later in scrollback or history grants nothing); every API call needs
// that session, the
// Host header must be the loopback address it listens on (no DNS
// rebinding), and a state-changing call must come from the console's own
// origin.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

//go:embed all:ui/dist
var dist embed.FS

// cookieName holds the session token in the browser.
const cookieName = "palyra_console"

// Sampling of the cluster's counters for the charts.
const (
	sampleEvery = 2 * time.Second
	maxSamples  = 450 // 15 minutes
)

// Sample is one reading of the cluster's job counters.
type Sample struct {
	AtMs    int64            `json:"at_ms"`
	ByPhase map[string]int64 `json:"by_phase"`
}

// Server is one console: the UI, its API and the samples for its charts.
type Server struct {
	cl    *client.Client
	token string
	log   *slog.Logger

	mu      sync.Mutex
	samples []Sample

	// session is the cookie value the token was traded for; "" until the
	// token is used. The token is good for one exchange only.
	authMu  sync.Mutex
	used    bool
	session string
}

// New returns a console that reaches the cluster through cl.
func New(cl *client.Client, log *slog.Logger) (*Server, error) {
	token, err := randomHex()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Server{cl: cl, token: token, log: log}, nil
}

func randomHex() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Token is the one-time login token the printed URL carries; the first
// visit consumes it.
func (s *Server) Token() string { return s.token }

// Run samples the cluster's counters for the charts until ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, sampleEvery)
	defer cancel()
	st, err := s.cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
	if err != nil {
		return
	}
	by := map[string]int64{}
	for k, v := range st.Msg.JobsByPhase {
		by[k] = int64(v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, Sample{AtMs: time.Now().UnixMilli(), ByPhase: by})
	if over := len(s.samples) - maxSamples; over > 0 {
		s.samples = append(s.samples[:0], s.samples[over:]...)
	}
}

// Handler serves the UI and the API. addr is the listener's address, the
// only Host the console answers to.
func (s *Server) Handler(addr string) http.Handler {
	ui, err := fs.Sub(dist, "ui/dist")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", s.login(http.FileServerFS(ui)))
	api := func(pattern string, h func(w http.ResponseWriter, r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r) {
				writeErr(w, http.StatusUnauthorized, "no console session: open the URL 'palyra console' printed (it carries the token)")
				return
			}
			if r.Method != http.MethodGet && !sameOrigin(r) {
				writeErr(w, http.StatusForbidden, "cross-origin request refused")
				return
			}
			v, err := h(w, r)
			if err != nil {
				e := s.cl.Explain(err)
				writeJSON(w, http.StatusBadGateway, map[string]string{"code": e.Code, "message": e.Message, "hint": e.Hint})
				return
			}
			if v != nil {
				writeJSON(w, http.StatusOK, v)
			}
		})
	}
	api("GET /api/overview", s.overview)
	api("GET /api/series", s.series)
	api("GET /api/jobs", s.jobs)
	api("GET /api/jobs/{id}", s.job)
	api("POST /api/jobs/{id}/cancel", s.cancel)
	api("GET /api/jobs/{id}/artifacts/{name}", s.artifact)
	api("GET /api/pairings", s.pairings)
	api("POST /api/pairings", s.createPairing)
	api("GET /api/devices", s.devices)
	api("POST /api/devices/{id}/revoke", s.revoke)
	api("GET /api/policy", s.policy)
	return hostCheck(addr, mux)
}

// login trades the token in the URL, once, for a session cookie holding a
// different random value, then sends the browser to the same page without
// it (so it stays out of history). A second use of the URL is refused: the
// token is spent, and whoever finds it later in scrollback or history gets
// nothing.
func (s *Server) login(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.URL.Query().Get("token"); t != "" {
			q := r.URL.Query()
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			if subtle.ConstantTimeCompare([]byte(t), []byte(s.token)) != 1 {
				refuse(w, http.StatusUnauthorized, "Wrong console token",
					"This link does not carry this console's token. Open the URL 'palyra console' printed, or run 'palyra console' again for a new one.")
				return
			}
			if s.authorized(r) {
				// This browser already holds the session (the link
				// opened again from its history): nothing to trade.
				http.Redirect(w, r, u.String(), http.StatusSeeOther)
				return
			}
			session, ok, err := s.consume()
			if err != nil {
				http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
				return
			}
			if !ok {
				refuse(w, http.StatusForbidden, "Console link already used",
					"This console link was already used: its token is good for one sign-in only. "+
						"Run 'palyra console' again for a new link (or reuse the browser tab that opened it first).")
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: session, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return
		}
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// consume spends the token: the first call returns a new session value,
// every later one ok=false.
func (s *Server) consume() (session string, ok bool, err error) {
	s.authMu.Lock()
	defer s.authMu.Unlock()
	if s.used {
		return "", false, nil
	}
	session, err = randomHex()
	if err != nil {
		return "", false, err
	}
	s.used, s.session = true, session
	return session, true, nil
}

// refuse answers a login that cannot be honoured with a small plain page.
func refuse(w http.ResponseWriter, code int, title, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%s</h1><p>%s</p>\n",
		html.EscapeString(title), html.EscapeString(title), html.EscapeString(msg))
}

func (s *Server) authorized(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return false
	}
	s.authMu.Lock()
	session := s.session
	s.authMu.Unlock()
	return session != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(session)) == 1
}

// hostCheck answers only requests addressed to the listener itself, by IP
// or as localhost: a page elsewhere that rebinds its own name to 127.0.0.1
// gets nothing.
func hostCheck(addr string, next http.Handler) http.Handler {
	_, port, _ := net.SplitHostPort(addr)
	allowed := map[string]bool{addr: true, "localhost:" + port: true, "127.0.0.1:" + port: true, "[::1]:" + port: true}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[r.Host] {
			http.Error(w, "unexpected Host header: open the console at the address 'palyra console' printed", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	return o == "" || o == "http://"+r.Host
}

var pj = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false}

// pjson is a proto message already rendered as JSON.
type pjson struct{ m proto.Message }

func (p pjson) MarshalJSON() ([]byte, error) { return pj.Marshal(p.m) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": msg})
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) (any, error) {
	st, err := s.cl.Node.Status(r.Context(), connect.NewRequest(&palyrav1.StatusRequest{}))
	if err != nil {
		return nil, err
	}
	nodes, err := s.cl.Node.ListNodes(r.Context(), connect.NewRequest(&palyrav1.ListNodesRequest{}))
	if err != nil {
		return nil, err
	}
	return map[string]any{"status": pjson{st.Msg}, "nodes": pjson{nodes.Msg}, "reached": s.cl.Reached()}, nil
}

func (s *Server) series(w http.ResponseWriter, r *http.Request) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]any{"every_ms": sampleEvery.Milliseconds(), "samples": append([]Sample{}, s.samples...)}, nil
}

func (s *Server) jobs(w http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := s.cl.Jobs.ListJobs(r.Context(), connect.NewRequest(&palyrav1.ListJobsRequest{Limit: 100, Stale: true}))
	if err != nil {
		return nil, err
	}
	return pjson{resp.Msg}, nil
}

func (s *Server) job(w http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := s.cl.Jobs.GetJob(r.Context(), connect.NewRequest(&palyrav1.GetJobRequest{Id: r.PathValue("id"), Stale: true}))
	if err != nil {
		return nil, err
	}
	return pjson{resp.Msg}, nil
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := s.cl.Jobs.CancelJob(r.Context(), connect.NewRequest(&palyrav1.CancelJobRequest{Id: r.PathValue("id")}))
	if err != nil {
		return nil, err
	}
	return pjson{resp.Msg}, nil
}

func (s *Server) artifact(w http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := s.cl.Jobs.GetArtifact(r.Context(), connect.NewRequest(&palyrav1.GetArtifactRequest{JobId: r.PathValue("id"), Name: r.PathValue("name")}))
	if err != nil {
		return nil, err
	}
	mt := resp.Msg.GetArtifact().GetMediaType()
	if mt != "image/png" && mt != "application/pdf" {
		mt = "application/octet-stream"
	}
	w.Header().Set("Content-Type", mt)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	w.Write(resp.Msg.Data)
	return nil, nil
}

func (s *Server) pairings(w http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := s.cl.Identity.ListPairings(r.Context(), connect.NewRequest(&palyrav1.ListPairingsRequest{}))
	if err != nil {
		return nil, err
	}
	return pjson{resp.Msg}, nil
}

func (s *Server) createPairing(w http.ResponseWriter, r *http.Request) (any, error) {
	var in struct {
		Kind     string `json:"kind"`
		Operator bool   `json:"operator"`
		Name     string `json:"name"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&in); err != nil {
		return nil, &client.Error{Code: "invalid_argument", Message: "bad request body: " + err.Error()}
	}
	resp, err := s.cl.Identity.CreatePairing(r.Context(), connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: in.Kind, Operator: in.Operator, Name: in.Name}))
	if err != nil {
		return nil, err
	}
	peers := s.cl.Reached()
	return map[string]any{"pairing": pjson{resp.Msg.Pairing}, "code": resp.Msg.Code, "peer": peers}, nil
}

func (s *Server) devices(w http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := s.cl.Identity.ListDevices(r.Context(), connect.NewRequest(&palyrav1.ListDevicesRequest{}))
	if err != nil {
		return nil, err
	}
	return pjson{resp.Msg}, nil
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := s.cl.Identity.RevokeMember(r.Context(), connect.NewRequest(&palyrav1.RevokeMemberRequest{Kind: "device", Id: r.PathValue("id")}))
	if err != nil {
		return nil, err
	}
	return pjson{resp.Msg}, nil
}

func (s *Server) policy(w http.ResponseWriter, r *http.Request) (any, error) {
	resp, err := s.cl.Policy.GetPolicy(r.Context(), connect.NewRequest(&palyrav1.GetPolicyRequest{}))
	if err != nil {
		return nil, err
	}
	return pjson{resp.Msg}, nil
}

// ErrNotLoopback refuses a console address other hosts could reach.
var ErrNotLoopback = errors.New("the console listens on loopback only (it acts with your operator credential); use 127.0.0.1:PORT and, from another machine, an SSH tunnel: ssh -L PORT:127.0.0.1:PORT HOST")

// Listen opens the console's listener on addr, which must be loopback.
func Listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, ErrNotLoopback
	}
	return net.Listen("tcp", addr)
}
