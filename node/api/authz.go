package api

import (
	"context"
	"fmt"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
)

// Authorizer decides every API call with Cedar. Its policy set is the one
// stored in Raft (or the shipped default until one is set), reloaded on
// every node when it changes.
type Authorizer struct {
	engine  *policy.Engine
	state   AuthzState
	version uint64
	log     *slog.Logger
}

// NewAuthorizer starts from the stored policy, else the default.
func NewAuthorizer(state AuthzState, log *slog.Logger) (*Authorizer, error) {
	def, err := policy.Parse(policy.DefaultPolicy())
	if err != nil {
		return nil, fmt.Errorf("default policy does not parse: %w", err)
	}
	a := &Authorizer{engine: policy.NewEngine(def), state: state, log: log}
	a.reload()
	return a, nil
}

// reload swaps in the stored policy if it changed. A stored policy that
// fails to parse here (it was validated before it was stored, so only a
// version skew can cause this) keeps the previous set and logs loudly.
func (a *Authorizer) reload() {
	p := a.state.Policy()
	if p.Version == 0 || p.Version == a.version {
		return
	}
	set, err := policy.Parse(p.Source)
	if err != nil {
		a.log.Error("stored policy does not parse on this node; keeping the previous one", "version", p.Version, "err", err)
		a.version = p.Version
		return
	}
	a.engine.Swap(set)
	a.version = p.Version
	a.log.Info("policy reloaded", "version", p.Version, "set_by", p.SetBy)
}

// Watch reloads the policy whenever the stored policy changes.
func (a *Authorizer) Watch(ctx context.Context) {
	for {
		ch := a.state.Watch(consensus.TopicPolicy)
		a.reload()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// Principal builds the policy principal for an authenticated caller from
// its certificate identity and its registry entry.
func (a *Authorizer) Principal(p identity.Principal) policy.Principal {
	pp := policy.Principal{Kind: string(p.Kind), ID: p.ID}
	if m, ok := a.state.Member(string(p.Kind), p.ID); ok {
		pp.Operator, pp.Labels, pp.Name = m.Operator, m.Labels, m.Name
	}
	return pp
}

// Check authorises action on res for the caller in ctx.
func (a *Authorizer) Check(ctx context.Context, action string, res policy.Resource, reqCtx map[string]any) error {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return apiError(connect.CodeUnauthenticated, "unauthenticated", "this call needs a cluster certificate",
			"pair this device with 'palyra device pair --code CODE --peer HOST:PORT'")
	}
	d := a.engine.Authorize(policy.Request{Principal: a.Principal(p), Action: action, Resource: res, Context: reqCtx})
	if d.Allow {
		return nil
	}
	return apiError(connect.CodePermissionDenied, "forbidden", policy.Explain(d),
		"ask an operator to allow it; see the policy with 'palyra policy get'")
}

// Allowed is Check as a boolean, for filtering lists.
func (a *Authorizer) Allowed(ctx context.Context, action string, res policy.Resource) bool {
	return a.Check(ctx, action, res, nil) == nil
}
