package api

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
)

// Authorizer decides every API call with Cedar. Its policy set is the one
// stored in Raft (or the shipped default until one is set), reloaded on
// every node when it changes.
type Authorizer struct {
	engine   *policy.Engine
	state    AuthzState
	reloadMu sync.Mutex // reload runs from Watch and from SetPolicy
	version  uint64
	log      *slog.Logger

	// Node-work decisions, cached briefly (they are asked per result and
	// per scheduling round); a policy change empties the cache at once.
	swaps     atomic.Uint64 // policy swaps so far
	nodeMu    sync.Mutex
	nodeSwaps uint64
	nodeCache map[nodeWorkKey]nodeWorkDecision
	// openNodeWork: the stored policy refuses node work to every node (a
	// policy stored before node_work was enforced, or restored from such
	// a backup): node work is allowed anyway, with an error in the log,
	// until a policy that permits it is set ('policy set' refuses one that
	// does not). Checked again every openCheckEvery.
	openNodeWork   bool
	openCheckedAt  time.Time
	openCheckedFor uint64 // swaps when last checked
}

const openCheckEvery = 10 * time.Second

type nodeWorkKey struct{ node, action, submitter, kind, job string }

type nodeWorkDecision struct {
	at  time.Time
	err error
}

// nodeWorkTTL bounds how long a node-work decision is reused: a registry
// change (a node's labels) reaches it within this; a policy change at once.
const nodeWorkTTL = time.Second

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
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
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
	a.swaps.Add(1)
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
	pp := a.Principal(p)
	d := a.engine.Authorize(policy.Request{Principal: pp, Action: action, Resource: res, Context: reqCtx})
	if d.Allow {
		return nil
	}
	// Not "see 'palyra policy get'": a caller who is not an operator is
	// denied that too.
	hint := "ask an operator to allow it (operators read and change the policy with 'palyra policy get' and 'palyra policy set')"
	if pp.Operator {
		// An operator is the one who can change it.
		hint = "the cluster's policy refuses it, operators included: change it with 'palyra policy get > p.cedar', edit, 'palyra policy set p.cedar'"
	}
	return apiError(connect.CodePermissionDenied, "forbidden", policy.Explain(d), hint)
}

// Allowed is Check as a boolean, for filtering lists.
func (a *Authorizer) Allowed(ctx context.Context, action string, res policy.Resource) bool {
	return a.Check(ctx, action, res, nil) == nil
}

// NodeWork authorises a node's own work (the node_work actions: raft.join,
// worker.heartbeat, blob.fetch, and worker.report on job jobID) for a peer
// call, where the caller is the certificate's principal, not a request
// context. A denial names the policy's reason.
func (a *Authorizer) NodeWork(p identity.Principal, action, jobID string) error {
	submitter, kind := "", ""
	if jobID != "" {
		if j, ok := a.state.Job(jobID); ok {
			submitter, kind = j.Submitter, j.Kind
		}
	}
	return a.NodeWorkOn(p, action, jobID, submitter, kind)
}

// NodeWorkOn is NodeWork for job jobID as its submission describes it
// (submitter, kind): a job a node ran before it was accepted is not in
// the state yet when the node's report of it is checked.
func (a *Authorizer) NodeWorkOn(p identity.Principal, action, jobID, submitter, kind string) error {
	res := policy.ClusterResource()
	key := nodeWorkKey{node: p.String(), action: action}
	if jobID != "" {
		res = policy.JobResource(jobID, submitter, kind)
		key.submitter, key.kind, key.job = submitter, kind, jobID
	}
	now := time.Now()
	swaps := a.swaps.Load()
	a.nodeMu.Lock()
	if a.nodeCache == nil || a.nodeSwaps != swaps || len(a.nodeCache) > 4096 {
		a.nodeCache, a.nodeSwaps = map[nodeWorkKey]nodeWorkDecision{}, swaps
	}
	if a.openCheckedFor != swaps || now.Sub(a.openCheckedAt) > openCheckEvery {
		a.openCheckedFor, a.openCheckedAt = swaps, now
		was := a.openNodeWork
		a.openNodeWork = refusesEveryNode(a.engine, a, a.state.Members("node")) != nil
		if a.openNodeWork && !was {
			a.log.Error("the stored policy refuses node work (worker.heartbeat or raft.join) to every node; allowing node work anyway so the cluster keeps running: set a policy that permits it ('palyra policy get', keep the default's \"nodes\" permit, 'palyra policy set')",
				"policy_version", a.state.Policy().Version)
		}
	}
	if a.openNodeWork {
		a.nodeMu.Unlock()
		return nil
	}
	if d, ok := a.nodeCache[key]; ok && now.Sub(d.at) < nodeWorkTTL {
		a.nodeMu.Unlock()
		return d.err
	}
	a.nodeMu.Unlock()
	var err error
	if d := a.engine.Authorize(policy.Request{Principal: a.Principal(p), Action: action, Resource: res}); !d.Allow {
		err = fmt.Errorf("%s: %s", action, policy.Explain(d))
	}
	a.nodeMu.Lock()
	if a.nodeSwaps == swaps {
		a.nodeCache[key] = nodeWorkDecision{at: now, err: err}
	}
	a.nodeMu.Unlock()
	return err
}
