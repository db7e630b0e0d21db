package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime/netguard"
)

type policyService struct{ s *Server }

func (ps policyService) GetPolicy(ctx context.Context, _ *connect.Request[palyrav1.GetPolicyRequest]) (*connect.Response[palyrav1.GetPolicyResponse], error) {
	if err := ps.s.authz.Check(ctx, policy.ActionPolicyGet, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	p := ps.s.control.State().Policy()
	if p.Version == 0 {
		return connect.NewResponse(&palyrav1.GetPolicyResponse{Source: string(policy.DefaultPolicy()), IsDefault: true}), nil
	}
	return connect.NewResponse(&palyrav1.GetPolicyResponse{Source: string(p.Source), Version: p.Version}), nil
}

// SetPolicy validates the new policy before storing it: a malformed policy
// is refused and the old one stays. It also refuses a policy that would
// lock the caller out of policy.set, so an operator cannot strand a cluster.
func (ps policyService) SetPolicy(ctx context.Context, req *connect.Request[palyrav1.SetPolicyRequest]) (*connect.Response[palyrav1.SetPolicyResponse], error) {
	s := ps.s
	if err := s.authz.Check(ctx, policy.ActionPolicySet, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	set, err := policy.Parse([]byte(req.Msg.Source))
	if err != nil {
		return nil, invalid("policy rejected: "+err.Error(), "fix the policy and set it again; the current policy is unchanged")
	}
	caller, _ := PrincipalFrom(ctx)
	d := policy.NewEngine(set).Authorize(policy.Request{Principal: s.authz.Principal(caller), Action: policy.ActionPolicySet, Resource: policy.ClusterResource()})
	if !d.Allow {
		return nil, invalid("policy rejected: it would forbid you ("+caller.String()+") from setting the policy again: "+policy.Explain(d),
			"keep a permit for policy.set for at least one operator device")
	}
	if err := refusesEveryNode(policy.NewEngine(set), s.authz, s.control.State().Members("node")); err != nil {
		return nil, err
	}
	if err := refusesHookGrants(policy.NewEngine(set), s.authz, s.control.State()); err != nil {
		return nil, err
	}
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{
		Source: []byte(req.Msg.Source), AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil {
		return nil, fromErr(err)
	}
	// The answer reads the local replica: through a follower, it may not
	// have applied the commit yet.
	if err := s.control.VerifyRead(ctx); err != nil {
		return nil, fromErr(err)
	}
	// The next call through this node is decided by the new policy (Watch
	// swaps it in on its own goroutine, which a call right after this
	// answer could beat: a bind then saw the policy before).
	s.authz.reload()
	s.log.Info("policy set", "by", caller, "version", s.control.State().Policy().Version)
	return connect.NewResponse(&palyrav1.SetPolicyResponse{Version: s.control.State().Policy().Version}), nil
}

func (ps policyService) CheckPolicy(ctx context.Context, req *connect.Request[palyrav1.CheckPolicyRequest]) (*connect.Response[palyrav1.CheckPolicyResponse], error) {
	s, m := ps.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionPolicyCheck, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	kind, id, ok := strings.Cut(m.Principal, ":")
	if !ok || (kind != "node" && kind != "device") || id == "" {
		return nil, invalid(fmt.Sprintf("principal %q is not KIND:ID", m.Principal), "e.g. --principal device:d-1a2b3c4d")
	}
	pp := policy.Principal{Kind: kind, ID: id}
	// The check is a what-if: it answers for any principal, and warns when
	// the registry would refuse the caller before the policy is asked.
	var warnings []string
	list := "palyra device list"
	if kind == "node" {
		list = "palyra nodes"
	}
	if mem, ok := s.control.State().Member(kind, id); !ok {
		warnings = append(warnings, fmt.Sprintf("no %s %q is paired with this cluster (see '%s'): the decision is for a %s with no name, no labels and no operator flag", kind, id, list, kind))
	} else {
		pp.Operator, pp.Labels, pp.Name = mem.Operator, mem.Labels, mem.Name
		if mem.Revoked {
			warnings = append(warnings, fmt.Sprintf("%s %s is revoked: every node refuses it, whatever the policy decides", kind, id))
		}
	}
	res, err := parseResource(s, m.Resource)
	if err != nil {
		return nil, err
	}
	var rc map[string]any
	if m.ContextJson != "" {
		if err := json.Unmarshal([]byte(m.ContextJson), &rc); err != nil {
			return nil, invalid(fmt.Sprintf("--context is not a JSON object: %v", err), `e.g. --context '{"grant_host":"example.com"}'`)
		}
	}
	if res.Type == policy.TypeGrant {
		// The context a job's grant is asked with, unless given.
		key := map[string]string{policy.GrantHTTP: "grant_host", policy.GrantSecret: "grant_key", policy.GrantKV: "grant_prefix"}[fmt.Sprint(res.Attrs["type"])]
		if _, given := rc[key]; key != "" && !given {
			if rc == nil {
				rc = map[string]any{}
			}
			rc[key] = res.ID
		}
	}
	d := s.authz.engine.Authorize(policy.Request{Principal: pp, Action: m.Action, Resource: res, Context: rc})
	return connect.NewResponse(&palyrav1.CheckPolicyResponse{Allow: d.Allow, Reasons: d.Reasons, Errors: d.Errors, Explanation: policy.Explain(d), Warnings: warnings}), nil
}

// parseResource reads "Cluster::default", "Job::j-…" (attributes from the
// stored job) or "Grant::TYPE:NAME".
func parseResource(s *Server, r string) (policy.Resource, error) {
	if r == "" {
		return policy.ClusterResource(), nil
	}
	typ, id, ok := strings.Cut(r, "::")
	if !ok {
		return policy.Resource{}, invalid(fmt.Sprintf("resource %q is not TYPE::ID", r), "e.g. Cluster::default, Job::j-…, Grant::http:example.com")
	}
	switch typ {
	case policy.TypeCluster:
		return policy.ClusterResource(), nil
	case policy.TypeJob:
		j, ok := s.control.State().Job(id)
		if !ok {
			return policy.Resource{}, invalid(fmt.Sprintf("no job %q", id), "list jobs with 'palyra job list'")
		}
		return jobResource(&j), nil
	case policy.TypeGrant:
		gt, name, _ := strings.Cut(id, ":")
		if gt == policy.GrantHTTP && name != "private" {
			// As a job's grant is asked about: in canonical form, with
			// its parent domains (LOCALHOST is localhost).
			n, err := netguard.NormaliseAllowHost(name)
			if err != nil {
				return policy.Resource{}, invalid(err.Error(), hostRule)
			}
			name = n
		}
		return policy.GrantResource(gt, name), nil
	}
	return policy.Resource{}, invalid(fmt.Sprintf("unknown resource type %q", typ), "use Cluster, Job or Grant")
}

// refusesEveryNode refuses a policy under which no node of the cluster
// could work (worker.heartbeat) or join raft: the cluster would accept
// jobs and never run them, or never heal. Refusing some nodes is a choice
// a policy may make; refusing all of them is a mistake.
func refusesEveryNode(e *policy.Engine, a *Authorizer, nodes []consensus.Member) error {
	for _, action := range []string{policy.ActionWorkerHeartbeat, policy.ActionRaftJoin} {
		allowed, asked := false, 0
		var last policy.Decision
		for _, m := range nodes {
			if m.Revoked {
				continue
			}
			asked++
			last = e.Authorize(policy.Request{Principal: a.Principal(identity.Principal{Kind: identity.KindNode, ID: m.ID}), Action: action, Resource: policy.ClusterResource()})
			if last.Allow {
				allowed = true
				break
			}
		}
		if asked > 0 && !allowed {
			return invalid(fmt.Sprintf("policy rejected: it would refuse every node %s, so no node could %s: %s", action, map[string]string{
				policy.ActionWorkerHeartbeat: "run jobs", policy.ActionRaftJoin: "join raft"}[action], policy.Explain(last)),
				"keep a permit of the node_work actions for nodes (the default policy's \"nodes\" permit)")
		}
	}
	return nil
}
