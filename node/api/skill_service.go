package api

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/identity/skill"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime/wasm"
)

// skillService is the replicated skill registry. A package is verified
// (structure, sums, signature against the publisher's trusted key) and
// audited on the node it enters through; its file and modules become
// replicated blobs before the command that installs it commits. A package
// that fails the audit is installed quarantined, with the reasons.
type skillService struct{ s *Server }

func skillInfo(r *raftpb.SkillRecord) *palyrav1.SkillInfo {
	info := &palyrav1.SkillInfo{
		SkillId: r.SkillId, Version: r.Version, Name: r.Name, Publisher: r.Publisher, PublisherKey: r.PublisherKey,
		PackageSha256: r.PackageSha256, PackageSize: r.PackageSize, Status: consensus.SkillStatusName(r.Status),
		Findings: r.Findings, HttpHosts: r.HttpHosts, Secrets: r.Secrets, KvPrefix: r.KvPrefix, Fuel: r.Fuel,
		MemoryBytes: r.MemoryBytes, WallClockMs: r.WallClockMs, InstalledAtMs: r.InstalledAtMs, InstalledBy: r.InstalledBy,
		StatusAtMs: r.StatusAtMs, StatusBy: r.StatusBy, Description: r.Description, AllowPrivate: r.AllowPrivate,
		PreviousVersion: r.PreviousVersion,
	}
	for _, t := range r.Tools {
		ti := &palyrav1.SkillToolInfo{Id: t.Id, Name: t.Name, Description: t.Description,
			ModuleSha256: t.ModuleSha256, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
			RequiresApproval: t.RequiresApproval, Deterministic: t.Deterministic}
		if g := t.Grants; g != nil {
			ti.Capabilities = &palyrav1.SkillToolCapabilities{HttpHosts: g.HttpHosts, AllowPrivate: g.AllowPrivate, Secrets: g.Secrets, KvPrefix: g.KvPrefix}
		}
		info.Tools = append(info.Tools, ti)
	}
	return info
}

// fresh makes the local replica reflect every committed change before a
// read (a skill installed through another node a moment ago is seen).
func (ss skillService) fresh(ctx context.Context) error {
	if err := ss.s.control.VerifyRead(ctx); err != nil {
		return fromErr(err)
	}
	return nil
}

func (ss skillService) apply(ctx context.Context, c *raftpb.SkillCommand) error {
	caller, _ := PrincipalFrom(ctx)
	c.AtMs, c.By, c.Rules = ss.s.now().UnixMilli(), caller.String(), consensus.SkillRules
	_, err := ss.s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_Skill{Skill: c}})
	if err != nil {
		return fromErr(err)
	}
	// The answer reads the local replica: let it catch up with the commit.
	return ss.fresh(ctx)
}

func (ss skillService) InstallSkill(ctx context.Context, req *connect.Request[palyrav1.InstallSkillRequest]) (*connect.Response[palyrav1.InstallSkillResponse], error) {
	s, m := ss.s, req.Msg
	// The package is read first (a bounded parse, by an authenticated
	// caller): policies may scope installs by its skill id and publisher.
	p, err := skill.Read(m.Package)
	if err != nil {
		return nil, invalid(err.Error(), "check the file with 'palyra skill inspect FILE'")
	}
	name := p.Manifest.Publisher
	if err := s.authz.Check(ctx, policy.ActionSkillInstall, policy.ClusterResource(), map[string]any{"skill_id": p.Manifest.SkillID, "publisher": name}); err != nil {
		return nil, err
	}
	if err := ss.fresh(ctx); err != nil {
		return nil, err
	}
	st := s.control.State()
	old, installed := st.Skill(p.Manifest.SkillID)
	if !installed {
		// A new id is in its publisher's namespace; one installed already
		// (before the rule) may still be upgraded by its publisher.
		if err := p.Manifest.CheckNamespace(); err != nil {
			return nil, invalid(err.Error(), "ask the publisher to rename the skill (skill_id in skill.toml)")
		}
	}
	if installed && old.Publisher != name {
		// Refused again, authoritatively, when the install applies; said
		// here too so trust-on-first-use trusts nothing for a refused package.
		return nil, apiError(connect.CodeFailedPrecondition, "conflict",
			fmt.Sprintf("skill %s is published by %s (version %s installed); a package from %s does not replace it", old.SkillId, old.Publisher, old.Version, name),
			fmt.Sprintf("a skill id belongs to its publisher; if %s should replace it, an operator removes it first ('palyra skill remove %s'), else give the package another skill_id", name, old.SkillId))
	}
	var trusted ed25519.PublicKey
	pub, known := st.Publisher(name)
	if known {
		if trusted, err = skill.ParsePublicKey(pub.Key); err != nil {
			return nil, fromErr(err)
		}
	} else if m.TrustOnFirstUse {
		// Pinning a publisher's key is trusting it, whoever asks.
		if err := s.authz.Check(ctx, policy.ActionSkillTrust, policy.ClusterResource(), map[string]any{"publisher": name}); err != nil {
			return nil, err
		}
	} else {
		return nil, apiError(connect.CodePermissionDenied, "untrusted_publisher",
			fmt.Sprintf("publisher %q is not trusted by this cluster", name),
			fmt.Sprintf("trust its key first: 'palyra skill trust add %s ed25519:…' (from the publisher), or install with --trust-on-first-use to pin the key this package is signed with", name))
	}
	key, err := p.Verify(trusted)
	if err != nil {
		code := "bad_signature"
		if errors.Is(err, skill.ErrKeyMismatch) {
			code = "key_mismatch"
		}
		return nil, apiError(connect.CodePermissionDenied, code, err.Error(), "only packages signed with the publisher's trusted key install")
	}
	// The same version with the same contents again: nothing to do. It
	// was an upgrade "replacing" the version before, a journal record and
	// a skill:installed event each time.
	digest := hex.EncodeToString(func() []byte { d := p.Digest(); return d[:] }())
	if old, ok := st.Skill(p.Manifest.SkillID); ok && old.Version == p.Manifest.Version &&
		(old.ContentSha256 == digest || old.ContentSha256 == "" && old.PackageSha256 == skill.Hash(m.Package)) {
		return connect.NewResponse(&palyrav1.InstallSkillResponse{Skill: skillInfo(old), Unchanged: true}), nil
	}
	trustedNow := false
	if !known {
		if err := ss.apply(ctx, &raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: name, Key: skill.FormatPublicKey(key)}}); err != nil {
			return nil, err
		}
		trustedNow = true
	}
	// The audit; then the runtime's own validation of every module.
	var findings []string
	for _, f := range p.Audit() {
		findings = append(findings, f.String())
	}
	for path, b := range p.Entries {
		if !strings.HasPrefix(path, "modules/") || len(b) > skill.MaxModuleBytes {
			continue
		}
		if err := s.validator.Validate(ctx, b); err != nil {
			var me *wasm.ModuleError
			if errors.As(err, &me) {
				findings = append(findings, fmt.Sprintf("module_invalid: %s: %s", path, me.Message))
				continue
			}
			return nil, fromErr(err)
		}
	}
	man := p.Manifest
	rec := &raftpb.SkillRecord{
		SkillId: man.SkillID, Version: man.Version, Name: man.Name, Publisher: name, PublisherKey: skill.FormatPublicKey(key),
		PackageSize: uint64(len(m.Package)), ContentSha256: digest, Status: consensus.SkillActive, Findings: findings, Description: man.Description,
		HttpHosts: man.Capabilities.HTTPHosts, AllowPrivate: man.Capabilities.AllowPrivate, Secrets: man.Capabilities.Secrets, KvPrefix: man.Capabilities.KVPrefix,
		Fuel: man.Capabilities.Fuel, MemoryBytes: man.Capabilities.MemoryMiB << 20, WallClockMs: man.Capabilities.WallClockMS,
	}
	if len(findings) > 0 {
		rec.Status = consensus.SkillQuarantined
	}
	// Blobs first (replicated to another node), then the command naming them.
	if rec.PackageSha256, err = s.blobs.Put(m.Package); err != nil {
		return nil, s.notStored(ctx, err)
	}
	hashes := map[string]string{}
	for _, t := range man.Tools {
		h, ok := hashes[t.Module]
		if !ok {
			if h, err = s.blobs.Put(p.Entries[t.Module]); err != nil {
				return nil, s.notStored(ctx, err)
			}
			hashes[t.Module] = h
		}
		st := &raftpb.SkillTool{Id: t.ID, Name: t.Name, Description: t.Description, ModuleSha256: h,
			InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, RequiresApproval: t.RequiresApproval, Deterministic: t.Deterministic}
		if c := t.Capabilities; c != nil {
			if !s.control.AllSupport(cluster.FeatureToolGrants) {
				// An older node would run the tool's hook jobs with the
				// skill's wider grants, and its replica would differ.
				return nil, apiError(connect.CodeFailedPrecondition, "failed_precondition",
					fmt.Sprintf("tool %s has its own capabilities, which not every node's software honours yet", t.ID),
					"finish upgrading every node ('palyra nodes' shows their versions), then install")
			}
			st.Grants = &raftpb.ToolGrants{HttpHosts: c.HTTPHosts, AllowPrivate: c.AllowPrivate, Secrets: c.Secrets, KvPrefix: c.KVPrefix}
		}
		rec.Tools = append(rec.Tools, st)
	}
	// Hooks bound to this skill run its new version's tools with their
	// grants: each binder must hold them, as when the hook was bound.
	if err := upgradeKeepsHookGrants(s.authz, s.control.State(), rec); err != nil {
		return nil, err
	}
	if err := ss.apply(ctx, &raftpb.SkillCommand{Install: rec, AllowDowngrade: m.AllowDowngrade}); err != nil {
		return nil, err
	}
	if len(findings) > 0 {
		s.log.Warn("skill installed quarantined", "skill", rec.SkillId, "version", rec.Version, "findings", strings.Join(findings, "; "))
	} else {
		s.log.Info("skill installed", "skill", rec.SkillId, "version", rec.Version, "publisher", name)
	}
	got, _ := st.Skill(rec.SkillId)
	if got == nil {
		got = rec
	}
	return connect.NewResponse(&palyrav1.InstallSkillResponse{Skill: skillInfo(got), TrustedNow: trustedNow}), nil
}

func (ss skillService) ListSkills(ctx context.Context, _ *connect.Request[palyrav1.ListSkillsRequest]) (*connect.Response[palyrav1.ListSkillsResponse], error) {
	if err := ss.s.authz.Check(ctx, policy.ActionSkillList, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if err := ss.fresh(ctx); err != nil {
		return nil, err
	}
	resp := &palyrav1.ListSkillsResponse{}
	for _, r := range ss.s.control.State().Skills() {
		resp.Skills = append(resp.Skills, skillInfo(r))
	}
	return connect.NewResponse(resp), nil
}

func (ss skillService) GetSkill(ctx context.Context, req *connect.Request[palyrav1.GetSkillRequest]) (*connect.Response[palyrav1.GetSkillResponse], error) {
	if err := ss.s.authz.Check(ctx, policy.ActionSkillList, policy.ClusterResource(), map[string]any{"skill_id": req.Msg.SkillId}); err != nil {
		return nil, err
	}
	if err := ss.fresh(ctx); err != nil {
		return nil, err
	}
	r, ok := ss.s.control.State().Skill(req.Msg.SkillId)
	if !ok {
		return nil, skillNotFound(req.Msg.SkillId)
	}
	return connect.NewResponse(&palyrav1.GetSkillResponse{Skill: skillInfo(r)}), nil
}

func skillNotFound(id string) error {
	return apiError(connect.CodeNotFound, "not_found", fmt.Sprintf("no skill %q is installed", id), "list them with 'palyra skill list'")
}

func (ss skillService) SetSkillStatus(ctx context.Context, req *connect.Request[palyrav1.SetSkillStatusRequest]) (*connect.Response[palyrav1.SetSkillStatusResponse], error) {
	m := req.Msg
	if err := ss.s.authz.Check(ctx, policy.ActionSkillManage, policy.ClusterResource(), map[string]any{"skill_id": m.SkillId}); err != nil {
		return nil, err
	}
	st, ok := consensus.ParseSkillStatus(m.Status)
	if !ok {
		return nil, invalid(fmt.Sprintf("status %q", m.Status), "use active, disabled or quarantined")
	}
	if err := ss.fresh(ctx); err != nil {
		return nil, err
	}
	if r, ok := ss.s.control.State().Skill(m.SkillId); ok && r.Status == st && (st == consensus.SkillActive || m.Reason == "" && consensus.StatusSetByOperator(r)) {
		// Already so: nothing to record (each repeat was a journal record
		// and a hook event). A new reason for a disable or quarantine is
		// recorded, and so is an operator's quarantine of a skill its
		// audit quarantined: the operator's decision outlives a clean
		// upgrade, the audit's does not.
		return connect.NewResponse(&palyrav1.SetSkillStatusResponse{Skill: skillInfo(r), Unchanged: true}), nil
	}
	c := &raftpb.SkillCommand{SetStatusId: m.SkillId, Status: st, Reason: m.Reason}
	var unbound []*palyrav1.HookInfo
	if m.Force && st != consensus.SkillActive {
		var err error
		if unbound, err = ss.forceUnbind(ctx, c, m.SkillId); err != nil {
			return nil, err
		}
	}
	if err := ss.apply(ctx, c); err != nil {
		return nil, err
	}
	r, ok := ss.s.control.State().Skill(m.SkillId)
	if !ok {
		return nil, skillNotFound(m.SkillId)
	}
	return connect.NewResponse(&palyrav1.SetSkillStatusResponse{Skill: skillInfo(r), UnboundHooks: unbound}), nil
}

// forceUnbind lists, in c, the hooks bound to a skill now, so that the
// command (disable, quarantine or remove with --force) unbinds them in the
// same entry. The FSM decides: a hook bound after this read is not listed
// and refuses the command, so none is left dangling.
func (ss skillService) forceUnbind(ctx context.Context, c *raftpb.SkillCommand, skillID string) ([]*palyrav1.HookInfo, error) {
	if err := ss.fresh(ctx); err != nil {
		return nil, err
	}
	var out []*palyrav1.HookInfo
	for _, h := range ss.s.control.State().Hooks() {
		if h.SkillId == skillID {
			c.UnbindHooks = append(c.UnbindHooks, h.Id)
			out = append(out, hookInfo(h))
		}
	}
	return out, nil
}

func (ss skillService) RemoveSkill(ctx context.Context, req *connect.Request[palyrav1.RemoveSkillRequest]) (*connect.Response[palyrav1.RemoveSkillResponse], error) {
	if err := ss.s.authz.Check(ctx, policy.ActionSkillManage, policy.ClusterResource(), map[string]any{"skill_id": req.Msg.SkillId}); err != nil {
		return nil, err
	}
	c := &raftpb.SkillCommand{RemoveId: req.Msg.SkillId}
	var unbound []*palyrav1.HookInfo
	if req.Msg.Force {
		var err error
		if unbound, err = ss.forceUnbind(ctx, c, req.Msg.SkillId); err != nil {
			return nil, err
		}
	}
	if err := ss.apply(ctx, c); err != nil {
		return nil, err
	}
	return connect.NewResponse(&palyrav1.RemoveSkillResponse{UnboundHooks: unbound}), nil
}

func (ss skillService) TrustPublisher(ctx context.Context, req *connect.Request[palyrav1.TrustPublisherRequest]) (*connect.Response[palyrav1.TrustPublisherResponse], error) {
	m := req.Msg
	if err := ss.s.authz.Check(ctx, policy.ActionSkillTrust, policy.ClusterResource(), map[string]any{"publisher": m.Name}); err != nil {
		return nil, err
	}
	if _, err := skill.ParsePublicKey(m.Key); err != nil {
		return nil, invalid(err.Error(), "the publisher's 'palyra skill keygen' printed its key")
	}
	if !skill.ValidName(m.Name) {
		return nil, invalid(fmt.Sprintf("publisher name %q: want 1-64 of a-z, 0-9, '.', '_', '-'", m.Name), "use the name the publisher's manifests give")
	}
	key, _ := skill.ParsePublicKey(m.Key)
	if err := ss.apply(ctx, &raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: m.Name, Key: skill.FormatPublicKey(key)}, ReplaceKey: m.Replace}); err != nil {
		return nil, err
	}
	p, _ := ss.s.control.State().Publisher(m.Name)
	return connect.NewResponse(&palyrav1.TrustPublisherResponse{Publisher: publisherInfo(p)}), nil
}

func publisherInfo(p *raftpb.PublisherRecord) *palyrav1.PublisherInfo {
	if p == nil {
		return nil
	}
	return &palyrav1.PublisherInfo{Name: p.Name, Key: p.Key, AtMs: p.AtMs, By: p.By}
}

func (ss skillService) ListPublishers(ctx context.Context, _ *connect.Request[palyrav1.ListPublishersRequest]) (*connect.Response[palyrav1.ListPublishersResponse], error) {
	if err := ss.s.authz.Check(ctx, policy.ActionSkillList, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if err := ss.fresh(ctx); err != nil {
		return nil, err
	}
	resp := &palyrav1.ListPublishersResponse{}
	for _, p := range ss.s.control.State().Publishers() {
		resp.Publishers = append(resp.Publishers, publisherInfo(p))
	}
	return connect.NewResponse(resp), nil
}

func (ss skillService) UntrustPublisher(ctx context.Context, req *connect.Request[palyrav1.UntrustPublisherRequest]) (*connect.Response[palyrav1.UntrustPublisherResponse], error) {
	if err := ss.s.authz.Check(ctx, policy.ActionSkillTrust, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if err := ss.apply(ctx, &raftpb.SkillCommand{Untrust: req.Msg.Name}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&palyrav1.UntrustPublisherResponse{}), nil
}

// skillRunKey carries a skill run's facts from RunSkill to the job record.
type skillRunKey struct{}

type skillRun struct {
	id, tool, outputSchema string
	approvalTTL            time.Duration // > 0: the run waits for approval that long
}

// DefaultApprovalTTL bounds how long a run waits for a person's decision.
const DefaultApprovalTTL = 24 * time.Hour

// RunSkill runs one tool as a job: the skill must be active, the input
// must satisfy the tool's input_schema (checked here, before anything is
// stored), and the job's grants are the skill's declared capabilities,
// each checked against the caller's policy as a job's would be, so what
// runs is the manifest's grants intersected with the policy's, and a
// grant outside either refuses the run. The worker checks the output
// against the tool's output_schema.
func (ss skillService) RunSkill(ctx context.Context, req *connect.Request[palyrav1.RunSkillRequest]) (*connect.Response[palyrav1.SubmitJobResponse], error) {
	s, m := ss.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionSkillRun, policy.ClusterResource(), map[string]any{"skill_id": m.SkillId, "skill_tool": m.Tool}); err != nil {
		return nil, err
	}
	if err := ss.fresh(ctx); err != nil {
		return nil, err
	}
	r, ok := s.control.State().Skill(m.SkillId)
	if !ok {
		return nil, skillNotFound(m.SkillId)
	}
	if r.Status != consensus.SkillActive {
		hint := "an operator may enable it: 'palyra skill enable " + r.SkillId + "'"
		if len(r.Findings) > 0 {
			hint = "it was quarantined because: " + strings.Join(r.Findings, "; ") + "; " + hint
		}
		return nil, apiError(connect.CodeFailedPrecondition, "skill_not_active", fmt.Sprintf("skill %s is %s", r.SkillId, consensus.SkillStatusName(r.Status)), hint)
	}
	var tool *raftpb.SkillTool
	var names []string
	for _, t := range r.Tools {
		names = append(names, t.Id)
		if t.Id == m.Tool {
			tool = t
		}
	}
	if tool == nil {
		return nil, apiError(connect.CodeNotFound, "not_found", fmt.Sprintf("skill %s has no tool %q", r.SkillId, m.Tool), "its tools: "+strings.Join(names, ", "))
	}
	var approvalTTL time.Duration
	if !tool.RequiresApproval && m.ApprovalTtlMs != 0 {
		return nil, invalid(fmt.Sprintf("%s/%s does not require approval, so --approval-ttl does not apply", r.SkillId, tool.Id), "leave --approval-ttl out")
	}
	if m.TimeoutMs > 0 && r.WallClockMs > 0 && m.TimeoutMs > r.WallClockMs {
		// It was lowered to the skill's limit without a word.
		return nil, invalid(fmt.Sprintf("--timeout %s is over %s's limit of %s per run (its manifest's wall_clock_ms)", time.Duration(m.TimeoutMs)*time.Millisecond, r.SkillId, time.Duration(r.WallClockMs)*time.Millisecond),
			fmt.Sprintf("give --timeout %s or less, or leave it out to get the limit", time.Duration(r.WallClockMs)*time.Millisecond))
	}
	if tool.RequiresApproval {
		approvalTTL = DefaultApprovalTTL
		if m.ApprovalTtlMs < 0 || time.Duration(m.ApprovalTtlMs)*time.Millisecond > 7*24*time.Hour {
			return nil, invalid("--approval-ttl must be between 1ms and 7 days", "")
		}
		if m.ApprovalTtlMs > 0 {
			approvalTTL = time.Duration(m.ApprovalTtlMs) * time.Millisecond
		}
	}
	var de *skill.DocError
	switch err := skill.Validate(tool.InputSchema, m.Input); {
	case err == nil:
	case !errors.As(err, &de):
		return nil, fromErr(err)
	case de.NotJSON:
		return nil, invalid(fmt.Sprintf("the input of %s/%s is not JSON: %s", r.SkillId, tool.Id, de.Detail), "pass a JSON document with --input")
	default:
		return nil, apiError(connect.CodeInvalidArgument, "input_invalid",
			fmt.Sprintf("the input does not match the input_schema of %s/%s: %s", r.SkillId, tool.Id, de.Detail),
			"see the schema with 'palyra skill get "+r.SkillId+" --json'")
	}
	timeout := m.TimeoutMs
	if r.WallClockMs > 0 && (timeout == 0 || timeout > r.WallClockMs) {
		timeout = r.WallClockMs
	}
	g := consensus.ToolGrants(r, tool)
	sub := &palyrav1.SubmitJobRequest{
		ModuleSha256: tool.ModuleSha256, Input: m.Input, AllowHosts: g.HTTPHosts, AllowPrivate: g.AllowPrivate, SecretNames: g.Secrets, KvPrefix: g.KVPrefix,
		Fuel: r.Fuel, MemoryBytes: r.MemoryBytes, TimeoutMs: timeout, Deterministic: tool.Deterministic, IdempotencyKey: m.IdempotencyKey,
	}
	if err := s.checkGrants(ctx, sub); err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodePermissionDenied {
			// The grants are the skill's, not the caller's choice: say where
			// they come from (a pure tool of a skill that declares hosts
			// asks for them too).
			return nil, apiError(connect.CodePermissionDenied, "forbidden",
				fmt.Sprintf("%s (a run of %s/%s asks for the capabilities its manifest declares: hosts %v, private addresses %v, secrets %v, kv prefix %q)",
					strings.TrimPrefix(ce.Message(), "forbidden: "), r.SkillId, tool.Id, g.HTTPHosts, g.AllowPrivate, g.Secrets, g.KVPrefix),
				"ask an operator to permit those grants to you (see the commented example in 'palyra policy get'), or to run the tool for you")
		}
		return nil, err
	}
	if err := s.validateSubmit(sub); err != nil {
		return nil, err
	}
	ctx, err := s.beforeRun(ctx, sub, "wasm", r.SkillId, tool.Id)
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, skillRunKey{}, skillRun{id: r.SkillId, tool: tool.Id, outputSchema: tool.OutputSchema, approvalTTL: approvalTTL})
	return jobService(ss).submitByHash(ctx, sub)
}

// approvalService records people's decisions on jobs waiting for
// approval. Cedar decides who may (job.approve on the job).
type approvalService struct{ s *Server }

func (as approvalService) DecideJob(ctx context.Context, req *connect.Request[palyrav1.DecideJobRequest]) (*connect.Response[palyrav1.DecideJobResponse], error) {
	s, m := as.s, req.Msg
	if len(m.Reason) > 1024 {
		return nil, invalid("the reason is over 1024 bytes", "say it in fewer words")
	}
	if err := s.control.VerifyRead(ctx); err != nil {
		return nil, fromErr(err)
	}
	if _, err := (jobService{s}).authorizedJob(ctx, policy.ActionJobApprove, m.Id); err != nil {
		return nil, err
	}
	caller, _ := PrincipalFrom(ctx)
	j, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_DecideJob{DecideJob: &raftpb.DecideJob{
		Id: m.Id, Approve: m.Approve, Reason: m.Reason, By: caller.String(), AtMs: s.now().UnixMilli(), Rules: consensus.SkillRules}}})
	if err != nil {
		return nil, fromErr(err)
	}
	verb := "denied"
	if m.Approve {
		verb = "approved"
	}
	s.log.Info("job "+verb, "job", m.Id, "by", caller, "reason", m.Reason)
	return connect.NewResponse(&palyrav1.DecideJobResponse{Job: JobToPB(&j)}), nil
}
