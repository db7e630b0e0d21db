package node

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/peerpb"
	"github.com/palyra-mesh/palyra/runtime/browser"
)

// Error codes of browser-session calls, as the API reports them.
const (
	sessionNotFound  = "not_found"
	sessionFull      = "resource_exhausted"
	sessionDenied    = "permission_denied"
	sessionNoBrowser = "failed_precondition"
	sessionFailed    = "step_failed"
	sessionInvalid   = "invalid_argument"
)

func sessionErr(code, msg, hint string) *peerpb.Response {
	return &peerpb.Response{Error: &peerpb.Error{Code: code, Message: msg, Hint: hint}}
}

// browserSession serves a browser-session call on this node's worker.
func (n *Node) browserSession(ctx context.Context, r *peerpb.BrowserSessionRequest) *peerpb.Response {
	n.metaMu.Lock()
	ex := n.browser
	n.metaMu.Unlock()
	if ex == nil {
		return sessionErr(sessionNoBrowser, "node "+n.state.NodeID+" runs no browser (no Chromium found)", browser.InstallHint)
	}
	pb := func(i browser.SessionInfo) *palyrav1.BrowserSession {
		return &palyrav1.BrowserSession{Id: i.ID, NodeId: n.state.NodeID, Owner: i.Owner, AllowHosts: i.AllowHosts, AllowPrivate: i.AllowPrivate,
			CreatedAtMs: i.CreatedAt.UnixMilli(), LastUsedAtMs: i.LastUsedAt.UnixMilli(), Actions: uint32(i.Actions), Url: i.URL}
	}
	reply := func(m *palyrav1.BrowserSessionResponse) *peerpb.Response {
		return &peerpb.Response{Body: &peerpb.Response_BrowserSession{BrowserSession: m}}
	}
	fail := func(err error) *peerpb.Response {
		switch {
		case errors.Is(err, browser.ErrNoSession):
			return sessionErr(sessionNotFound, err.Error(), "list open sessions with 'palyra browser list'; open a new one with 'palyra browser open'")
		case errors.Is(err, browser.ErrSessionsFull):
			return sessionErr(sessionFull, err.Error(), "")
		}
		return sessionErr(sessionFailed, err.Error(), "")
	}
	if r.Op == "list" {
		out := &palyrav1.ListBrowserSessionsResponse{}
		for _, s := range ex.Sessions() {
			if r.Operator || s.Owner == r.Owner {
				out.Sessions = append(out.Sessions, pb(s))
			}
		}
		return &peerpb.Response{Body: &peerpb.Response_BrowserSessions{BrowserSessions: out}}
	}
	if r.Op == "open" {
		info, err := ex.OpenSession(ctx, browser.SessionSpec{ID: r.SessionId, Owner: r.Owner, AllowHosts: r.AllowHosts, AllowPrivate: r.AllowPrivate})
		if err != nil {
			if !errors.Is(err, browser.ErrSessionsFull) {
				return sessionErr(sessionInvalid, err.Error(), "")
			}
			return fail(err)
		}
		return reply(&palyrav1.BrowserSessionResponse{Session: pb(info)})
	}
	info, err := ex.Session(r.SessionId)
	if err != nil {
		return fail(err)
	}
	if !r.Operator && info.Owner != r.Owner {
		// Do not tell a stranger more than that it is not theirs.
		return sessionErr(sessionDenied, "browser session "+r.SessionId+" belongs to another principal", "drive your own sessions ('palyra browser list'), or ask an operator")
	}
	switch r.Op {
	case "do":
		steps := make([]json.RawMessage, len(r.Steps))
		for i, s := range r.Steps {
			steps[i] = s
		}
		res, err := ex.Do(ctx, r.SessionId, steps)
		if err != nil {
			return fail(err)
		}
		info, _ = ex.Session(r.SessionId)
		m := &palyrav1.BrowserSessionResponse{Session: pb(info), Values: res.Values, Observations: res.Observations, Notes: res.Notes}
		for _, a := range res.Artifacts {
			m.Files = append(m.Files, &palyrav1.BrowserFile{Name: a.Name, MediaType: a.MediaType, Data: a.Data})
		}
		return reply(m)
	case "screenshot":
		data, mt, err := ex.Screenshot(ctx, r.SessionId)
		if err != nil {
			return fail(err)
		}
		return reply(&palyrav1.BrowserSessionResponse{Session: pb(info), Files: []*palyrav1.BrowserFile{{Name: "screenshot", MediaType: mt, Data: data}}})
	case "close":
		if err := ex.CloseSession(r.SessionId); err != nil {
			return fail(err)
		}
		return reply(&palyrav1.BrowserSessionResponse{Session: pb(info)})
	}
	return sessionErr(sessionInvalid, "unknown browser-session operation "+r.Op, "")
}
