package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// Browsers relays browser-session calls to the worker that holds (or is
// to hold) a session.
type Browsers interface {
	BrowserSession(ctx context.Context, node string, r *peerpb.BrowserSessionRequest) (*peerpb.Response, error)
}

// maxSessionSteps bounds the steps of one Do call.
const maxSessionSteps = 64

// A session id names its worker: "bs-" + the node id's hex + "-" + 16
// random hex digits, so any node routes a call without replicated state.
var sessionIDRE = regexp.MustCompile(`^bs-([0-9a-f]{8})-[0-9a-f]{16}$`)

func newSessionID(node string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return "bs-" + strings.TrimPrefix(node, "n-") + "-" + hex.EncodeToString(b)
}

type browserService struct{ s *Server }

// caller is the principal in the form sessions record as their owner, and
// whether it is an operator (who may drive anyone's session).
func (bs browserService) caller(ctx context.Context) (string, bool) {
	p, _ := PrincipalFrom(ctx)
	return p.String(), bs.s.authz.Principal(p).Operator
}

func (bs browserService) relay(ctx context.Context, node string, r *peerpb.BrowserSessionRequest) (*peerpb.Response, error) {
	if bs.s.Browsers == nil {
		return nil, apiError(connect.CodeUnimplemented, "unimplemented", "this node relays no browser sessions", "")
	}
	resp, err := bs.s.Browsers.BrowserSession(ctx, node, r)
	if err != nil {
		return nil, apiError(connect.CodeUnavailable, "unavailable", err.Error(), "open a new session with 'palyra browser open'")
	}
	if e := resp.Error; e != nil {
		cc := map[string]connect.Code{"not_found": connect.CodeNotFound, "resource_exhausted": connect.CodeResourceExhausted,
			"permission_denied": connect.CodePermissionDenied, "failed_precondition": connect.CodeFailedPrecondition,
			"invalid_argument": connect.CodeInvalidArgument, "step_failed": connect.CodeFailedPrecondition}[e.Code]
		if cc == 0 {
			cc = connect.CodeInternal
		}
		return nil, apiError(cc, e.Code, e.Message, e.Hint)
	}
	return resp, nil
}

// workerOf is the node a session id names.
func workerOf(id string) (string, error) {
	m := sessionIDRE.FindStringSubmatch(id)
	if m == nil {
		return "", invalid(fmt.Sprintf("%q is not a browser session id", id), "session ids look like bs-1a2b3c4d-0123456789abcdef ('palyra browser list')")
	}
	return "n-" + m[1], nil
}

// browserWorkers lists the alive nodes that offer browser capacity and
// take new work (not made ineligible, draining or removed: a session
// opened on a node an operator had disabled, while jobs stayed queued),
// and how many were left out for that.
func (bs browserService) browserWorkers() (out []cluster.Member, excluded int) {
	return bs.browserNodes(true)
}

// browserNodes lists the alive nodes that offer browser capacity; with
// newWork, only those that take new work (the others are counted).
// Sessions already open on a node made ineligible since are still listed
// and driven (browserNodes(false)).
func (bs browserService) browserNodes(newWork bool) (out []cluster.Member, excluded int) {
	if bs.s.Members == nil {
		return nil, 0
	}
	st := bs.s.control.State()
	for _, m := range bs.s.Members() {
		if m.State != cluster.StateAlive || m.Capacity["browser"] <= 0 {
			continue
		}
		if rec, ok := st.Member("node", m.ID); newWork && ok && (rec.Ineligible || rec.Draining || rec.Revoked) {
			excluded++
			continue
		}
		out = append(out, m)
	}
	return out, excluded
}

func (bs browserService) OpenSession(ctx context.Context, req *connect.Request[palyrav1.OpenBrowserSessionRequest]) (*connect.Response[palyrav1.BrowserSessionResponse], error) {
	s, m := bs.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionBrowserOpen, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	hosts, err := s.checkHTTPGrants(ctx, m.AllowHosts, m.AllowPrivate)
	if err != nil {
		return nil, err
	}
	m.AllowHosts = hosts
	owner, _ := bs.caller(ctx)
	workers, excluded := bs.browserWorkers()
	if m.NodeId != "" {
		workers = filterMembers(workers, func(w cluster.Member) bool { return w.ID == m.NodeId })
		if len(workers) == 0 {
			return nil, apiError(connect.CodeFailedPrecondition, "no_browser", fmt.Sprintf("node %s is not an alive node with a browser that takes new work", m.NodeId),
				"see 'palyra nodes' (capacity browser, eligibility); 'palyra node eligibility ID --enable' makes a disabled node take work again")
		}
	}
	if len(workers) == 0 && excluded > 0 {
		return nil, apiError(connect.CodeFailedPrecondition, "no_browser", fmt.Sprintf("no node in the cluster can open a browser session: the %d with a browser take no new work (ineligible or draining)", excluded),
			"make one eligible again: 'palyra node eligibility ID --enable' ('palyra nodes' shows them)")
	}
	if len(workers) == 0 {
		return nil, apiError(connect.CodeFailedPrecondition, "no_browser", "no node in the cluster can run browser sessions: none has Chromium",
			"install it on a worker (Debian: apt-get install -y chromium-headless-shell); running nodes find it within 10s")
	}
	// Spread sessions: start at a random worker, move on when one is full.
	start := int(randByte()) % len(workers)
	var lastErr error
	for i := range workers {
		w := workers[(start+i)%len(workers)]
		resp, err := bs.relay(ctx, w.ID, &peerpb.BrowserSessionRequest{Op: "open", SessionId: newSessionID(w.ID), Owner: owner,
			AllowHosts: m.AllowHosts, AllowPrivate: m.AllowPrivate})
		if err == nil {
			return connect.NewResponse(resp.GetBrowserSession()), nil
		}
		lastErr = err
		if ce, ok := err.(*connect.Error); ok && ce.Code() != connect.CodeResourceExhausted && ce.Code() != connect.CodeUnavailable {
			return nil, err
		}
	}
	return nil, lastErr
}

func randByte() byte {
	b := make([]byte, 1)
	rand.Read(b)
	return b[0]
}

func filterMembers(in []cluster.Member, keep func(cluster.Member) bool) []cluster.Member {
	var out []cluster.Member
	for _, v := range in {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

// sessionCall relays op on session id for the caller.
func (bs browserService) sessionCall(ctx context.Context, op, id string, steps [][]byte) (*peerpb.Response, error) {
	if err := bs.s.authz.Check(ctx, policy.ActionBrowserDrive, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	node, err := workerOf(id)
	if err != nil {
		return nil, err
	}
	owner, op2 := bs.caller(ctx)
	return bs.relay(ctx, node, &peerpb.BrowserSessionRequest{Op: op, SessionId: id, Owner: owner, Operator: op2, Steps: steps})
}

func (bs browserService) Do(ctx context.Context, req *connect.Request[palyrav1.BrowserDoRequest]) (*connect.Response[palyrav1.BrowserSessionResponse], error) {
	if len(req.Msg.Steps) == 0 {
		return nil, invalid("no steps", `give at least one step, e.g. {"action":"observe"}`)
	}
	if len(req.Msg.Steps) > maxSessionSteps {
		return nil, invalid(fmt.Sprintf("%d steps in one call; the limit is %d", len(req.Msg.Steps), maxSessionSteps), "split them over several calls")
	}
	resp, err := bs.sessionCall(ctx, "do", req.Msg.Id, req.Msg.Steps)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp.GetBrowserSession()), nil
}

func (bs browserService) Screenshot(ctx context.Context, req *connect.Request[palyrav1.BrowserSessionRef]) (*connect.Response[palyrav1.BrowserScreenshotResponse], error) {
	resp, err := bs.sessionCall(ctx, "screenshot", req.Msg.Id, nil)
	if err != nil {
		return nil, err
	}
	files := resp.GetBrowserSession().GetFiles()
	if len(files) == 0 {
		return nil, apiError(connect.CodeInternal, "internal", "the worker sent no screenshot", "")
	}
	return connect.NewResponse(&palyrav1.BrowserScreenshotResponse{Data: files[0].Data, MediaType: files[0].MediaType}), nil
}

func (bs browserService) CloseSession(ctx context.Context, req *connect.Request[palyrav1.BrowserSessionRef]) (*connect.Response[palyrav1.BrowserSessionResponse], error) {
	resp, err := bs.sessionCall(ctx, "close", req.Msg.Id, nil)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp.GetBrowserSession()), nil
}

// ListSessions asks every browser worker for the caller's sessions (an
// operator's: everyone's).
func (bs browserService) ListSessions(ctx context.Context, req *connect.Request[palyrav1.ListBrowserSessionsRequest]) (*connect.Response[palyrav1.ListBrowserSessionsResponse], error) {
	if err := bs.s.authz.Check(ctx, policy.ActionBrowserDrive, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	owner, op := bs.caller(ctx)
	out := &palyrav1.ListBrowserSessionsResponse{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	nodes, _ := bs.browserNodes(false)
	for _, w := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := bs.relay(ctx, w.ID, &peerpb.BrowserSessionRequest{Op: "list", Owner: owner, Operator: op})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				out.Unreachable = append(out.Unreachable, w.ID)
				return
			}
			out.Sessions = append(out.Sessions, resp.GetBrowserSessions().GetSessions()...)
		}()
	}
	wg.Wait()
	sort.Slice(out.Sessions, func(a, b int) bool { return out.Sessions[a].CreatedAtMs < out.Sessions[b].CreatedAtMs })
	sort.Strings(out.Unreachable)
	return connect.NewResponse(out), nil
}
