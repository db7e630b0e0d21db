package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime/netguard"
)

// A hook's jobs run with the grants of the tool it binds, whoever's job
// fired it, and the FSM queues them without asking the policy. So the
// policy is asked when the hook is bound, for the principal binding it,
// and again when a policy is set: a hook whose binder the new policy
// forbids a grant of is named and the policy refused, until the hook is
// unbound. (A hook bound while a forbid on a secret was in force read
// that secret on every job.)

// grantAsk is one policy request a job with some grants asks.
type grantAsk struct {
	action string
	res    policy.Resource
	ctx    map[string]any
	what   string // "secret tok1", "host api.example.com", …
}

// grantAsks lists the requests a job with grants g asks, as checkGrants
// asks them (hosts in canonical form).
func grantAsks(g consensus.Grants) []grantAsk {
	var out []grantAsk
	for _, name := range g.Secrets {
		out = append(out, grantAsk{policy.ActionGrantSecret, policy.GrantResource(policy.GrantSecret, name), map[string]any{"grant_key": name}, "secret " + name})
	}
	if g.KVPrefix != "" {
		out = append(out, grantAsk{policy.ActionGrantKV, policy.GrantResource(policy.GrantKV, g.KVPrefix), map[string]any{"grant_prefix": g.KVPrefix}, fmt.Sprintf("key-value prefix %q", g.KVPrefix)})
	}
	for _, h := range g.HTTPHosts {
		if n, err := netguard.NormaliseAllowHost(h); err == nil {
			h = n
		}
		out = append(out, grantAsk{policy.ActionGrantHTTP, policy.GrantResource(policy.GrantHTTP, h), map[string]any{"grant_host": h}, "host " + h})
	}
	if g.AllowPrivate {
		out = append(out, grantAsk{policy.ActionGrantHTTP, policy.GrantResource(policy.GrantHTTP, "private"), map[string]any{"grant_host": "private"}, "private addresses"})
	}
	return out
}

// checkHookGrants refuses binding a tool whose grants the policy forbids
// the caller.
func (s *Server) checkHookGrants(ctx context.Context, sk *raftpb.SkillRecord, tool *raftpb.SkillTool, event string) error {
	for _, a := range grantAsks(consensus.ToolGrants(sk, tool)) {
		if err := s.authz.Check(ctx, a.action, a.res, a.ctx); err != nil {
			var ce *connect.Error
			if errors.As(err, &ce) && ce.Code() == connect.CodePermissionDenied {
				return apiError(connect.CodePermissionDenied, "forbidden",
					fmt.Sprintf("%s: binding %s/%s to %s would run it on every such event with %s, which the policy does not allow you",
						strings.TrimPrefix(ce.Message(), "forbidden: "), sk.SkillId, tool.Id, event, a.what),
					"ask an operator to permit that grant to you, or bind a tool that does not need it")
			}
			return err
		}
	}
	return nil
}

// hookGrantDenial is the first grant of hook h's tool (in skill sk) that
// e refuses h's binder, with the decision; ok false when all are allowed.
func hookGrantDenial(e *policy.Engine, a *Authorizer, h *raftpb.HookRecord, sk *raftpb.SkillRecord) (what string, d policy.Decision, denied bool) {
	var tool *raftpb.SkillTool
	for _, t := range sk.Tools {
		if t.Id == h.Tool {
			tool = t
		}
	}
	if tool == nil {
		return "", policy.Decision{}, false
	}
	kind, id, _ := strings.Cut(h.By, ":")
	pp := a.Principal(identity.Principal{Kind: identity.Kind(kind), ID: id})
	for _, ask := range grantAsks(consensus.ToolGrants(sk, tool)) {
		if d := e.Authorize(policy.Request{Principal: pp, Action: ask.action, Resource: ask.res, Context: ask.ctx}); !d.Allow {
			return ask.what, d, true
		}
	}
	return "", policy.Decision{}, false
}

// refusesHookGrants refuses a policy under which a bound hook's binder
// may not have the grants its jobs run with.
func refusesHookGrants(e *policy.Engine, a *Authorizer, st State) error {
	for _, h := range st.Hooks() {
		sk, ok := st.Skill(h.SkillId)
		if !ok {
			continue
		}
		if what, d, denied := hookGrantDenial(e, a, h, sk); denied {
			return invalid(fmt.Sprintf("policy rejected: hook %s (%s → %s/%s, bound by %s) runs its jobs with %s, which this policy forbids its binder: %s",
				h.Id, h.Event, h.SkillId, h.Tool, h.By, what, policy.Explain(d)),
				fmt.Sprintf("unbind the hook first ('palyra hook unbind %s'), or keep a permit for that grant", h.Id))
		}
	}
	return nil
}

// upgradeKeepsHookGrants refuses installing rec over a skill whose bound
// hooks' binders the policy forbids a grant the new version's tools ask
// for (a version that adds a secret read it on every hooked job).
func upgradeKeepsHookGrants(a *Authorizer, st State, rec *raftpb.SkillRecord) error {
	for _, h := range st.Hooks() {
		if h.SkillId != rec.SkillId {
			continue
		}
		if what, d, denied := hookGrantDenial(a.engine, a, h, rec); denied {
			return apiError(connect.CodePermissionDenied, "forbidden",
				fmt.Sprintf("hook %s (%s → %s/%s, bound by %s) would run this version's tool with %s, which the policy forbids its binder: %s",
					h.Id, h.Event, h.SkillId, h.Tool, h.By, what, policy.Explain(d)),
				fmt.Sprintf("unbind the hook first ('palyra hook unbind %s'), or permit that grant to %s", h.Id, h.By))
		}
	}
	return nil
}
