package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/identity/skill"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// hookService binds events to skill tools. Binding is a skill.manage
// action: a hook runs a tool with the skill's grants on events other
// principals cause.
type hookService struct{ s *Server }

func hookInfo(h *raftpb.HookRecord) *palyrav1.HookInfo {
	return &palyrav1.HookInfo{Id: h.Id, Event: h.Event, SkillId: h.SkillId, Tool: h.Tool, AtMs: h.AtMs, By: h.By}
}

func (hs hookService) BindHook(ctx context.Context, req *connect.Request[palyrav1.BindHookRequest]) (*connect.Response[palyrav1.BindHookResponse], error) {
	s, m := hs.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionSkillManage, policy.ClusterResource(), map[string]any{"skill_id": m.SkillId}); err != nil {
		return nil, err
	}
	if !slices.Contains(consensus.HookEvents, m.Event) {
		return nil, invalid(fmt.Sprintf("unknown event %q", m.Event), "events: "+strings.Join(consensus.HookEvents, ", "))
	}
	if err := s.control.VerifyRead(ctx); err != nil {
		return nil, fromErr(err)
	}
	sk, ok := s.control.State().Skill(m.SkillId)
	if !ok {
		return nil, skillNotFound(m.SkillId)
	}
	var tool *raftpb.SkillTool
	for _, t := range sk.Tools {
		if t.Id == m.Tool {
			tool = t
		}
	}
	if tool == nil {
		return nil, apiError(connect.CodeNotFound, "not_found", fmt.Sprintf("skill %s has no tool %q", m.SkillId, m.Tool), "see its tools with 'palyra skill get "+m.SkillId+"'")
	}
	// A tool whose input_schema refuses this event's input could never
	// run as the hook (a before_run one would refuse every job): try a
	// sample of the input it would get.
	if err := skill.Validate(tool.InputSchema, sampleHookInput(m.Event)); err != nil {
		if de := (*skill.DocError)(nil); errors.As(err, &de) && !de.NotJSON {
			err = errors.New(de.Detail)
		}
		return nil, invalid(fmt.Sprintf("tool %s/%s does not take %s events: its input_schema refuses the input a hook gets (%v)", m.SkillId, m.Tool, m.Event, err),
			"bind a tool made for hooks (its input has event, hook and job or subject: see examples/skills/guard), or change the tool's input_schema")
	}
	// The hook's jobs run with the tool's grants: the binder must hold them.
	if err := s.checkHookGrants(ctx, sk, tool, m.Event); err != nil {
		return nil, err
	}
	// The same binding twice ran the tool twice per event (a guard judged
	// every job twice).
	for _, h := range s.control.State().Hooks() {
		if h.Event == m.Event && h.SkillId == m.SkillId && h.Tool == m.Tool {
			return nil, apiError(connect.CodeAlreadyExists, "conflict", fmt.Sprintf("hook %s binds %s to %s/%s already", h.Id, m.Event, m.SkillId, m.Tool),
				"see the hooks with 'palyra hook list'")
		}
	}
	caller, _ := PrincipalFrom(ctx)
	h := &raftpb.HookRecord{Id: "h-" + strings.TrimPrefix(newJobID(), "j-")[:8], Event: m.Event, SkillId: m.SkillId, Tool: m.Tool}
	var rules uint32 // the duplicate check in Apply, once every replica makes it
	if s.control.AllSupport(cluster.FeatureHookRules) {
		rules = consensus.HookRules
	}
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Bind: h, AtMs: s.now().UnixMilli(), By: caller.String(), Rules: rules}}}); err != nil {
		return nil, fromErr(err)
	}
	h.AtMs, h.By = s.now().UnixMilli(), caller.String()
	return connect.NewResponse(&palyrav1.BindHookResponse{Hook: hookInfo(h)}), nil
}

func (hs hookService) UnbindHook(ctx context.Context, req *connect.Request[palyrav1.UnbindHookRequest]) (*connect.Response[palyrav1.UnbindHookResponse], error) {
	s := hs.s
	if err := s.authz.Check(ctx, policy.ActionSkillManage, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	caller, _ := PrincipalFrom(ctx)
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Unbind: req.Msg.Id, AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil {
		return nil, fromErr(err)
	}
	return connect.NewResponse(&palyrav1.UnbindHookResponse{}), nil
}

func (hs hookService) ListHooks(ctx context.Context, _ *connect.Request[palyrav1.ListHooksRequest]) (*connect.Response[palyrav1.ListHooksResponse], error) {
	s := hs.s
	if err := s.authz.Check(ctx, policy.ActionSkillList, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if err := s.control.VerifyRead(ctx); err != nil {
		return nil, fromErr(err)
	}
	resp := &palyrav1.ListHooksResponse{}
	for _, h := range s.control.State().Hooks() {
		resp.Hooks = append(resp.Hooks, hookInfo(h))
	}
	return connect.NewResponse(resp), nil
}

// Hook decisions, in precedence order (the highest of several wins).
var hookDecisions = []string{"continue", "annotate", "request_approval", "block", "fail_run"}

// hookOutcome is what before_run hooks decided for a submission; the job
// record picks it up (jobRecord).
type hookOutcome struct {
	approval    bool
	annotations []string
}

type hookOutcomeKey struct{}

// beforeRunTimeout bounds one before_run hook's run.
const beforeRunTimeout = 30 * time.Second

// beforeRun runs the before_run hooks for a submission, one after another
// (by hook id), each as a job with the submission's description as input,
// and combines their decisions: block and fail_run refuse the submission
// (nothing is stored), request_approval makes the job wait for a person,
// annotate adds notes to the job. A hook that cannot run or answers
// nonsense refuses the submission (fail closed): a guard that is down must
// not let everything through. It returns ctx carrying the outcome.
func (s *Server) beforeRun(ctx context.Context, sub *palyrav1.SubmitJobRequest, kind, skillID, tool string) (context.Context, error) {
	st := s.control.State()
	hooks := st.HooksFor(consensus.HookBeforeRun)
	if len(hooks) == 0 {
		return ctx, nil
	}
	caller, _ := PrincipalFrom(ctx)
	desc := map[string]any{
		"kind": kind, "submitter": caller.String(), "module_sha256": sub.ModuleSha256, "input_size": len(sub.Input),
		"allow_hosts": sub.AllowHosts, "allow_private": sub.AllowPrivate, "secrets": sub.SecretNames, "kv_prefix": sub.KvPrefix,
		"skill_id": skillID, "skill_tool": tool, "tasks": max(1, len(sub.Inputs)),
	}
	best, out := 0, hookOutcome{}
	var reasons []string
	for _, h := range hooks {
		d, err := s.runBeforeHook(ctx, h, desc)
		if err != nil {
			return ctx, apiError(connect.CodeFailedPrecondition, "hook_failed",
				fmt.Sprintf("before_run hook %s (%s/%s) could not decide: %v; the job was not accepted", h.Id, h.SkillId, h.Tool, err),
				"fix or unbind the hook ('palyra hook list', 'palyra hook unbind ID')")
		}
		rank := slices.Index(hookDecisions, d.Decision)
		if d.Annotation != "" {
			out.annotations = append(out.annotations, h.Id+": "+d.Annotation)
		}
		if rank >= 2 && d.Reason != "" {
			reasons = append(reasons, h.Id+": "+d.Reason)
		}
		best = max(best, rank)
	}
	switch hookDecisions[best] {
	case "block":
		return ctx, apiError(connect.CodePermissionDenied, "blocked_by_hook", "a before_run hook blocked the job: "+strings.Join(reasons, "; "),
			"the job was not accepted; ask whoever bound the hook ('palyra hook list')")
	case "fail_run":
		return ctx, apiError(connect.CodeFailedPrecondition, "failed_by_hook", "a before_run hook failed the run: "+strings.Join(reasons, "; "),
			"the job was not accepted; ask whoever bound the hook ('palyra hook list')")
	case "request_approval":
		if len(sub.Inputs) > 0 {
			return ctx, apiError(connect.CodeFailedPrecondition, "approval_required",
				"a before_run hook requires approval, and a job array cannot wait for approval: "+strings.Join(reasons, "; "),
				"submit the tasks as single jobs, or ask whoever bound the hook")
		}
		out.approval = true
		if len(reasons) > 0 {
			out.annotations = append(out.annotations, "approval requested by "+strings.Join(reasons, "; "))
		}
	}
	return context.WithValue(ctx, hookOutcomeKey{}, out), nil
}

// hookDecision is what a before_run hook's tool prints.
type hookDecision struct {
	Decision   string `json:"decision"`
	Reason     string `json:"reason"`
	Annotation string `json:"annotation"`
}

// runBeforeHook runs one before_run hook as a job and reads its decision.
func (s *Server) runBeforeHook(ctx context.Context, h *raftpb.HookRecord, desc map[string]any) (hookDecision, error) {
	var d hookDecision
	st := s.control.State()
	sk, ok := st.Skill(h.SkillId)
	if !ok || sk.Status != consensus.SkillActive {
		return d, fmt.Errorf("skill %s is not installed and active", h.SkillId)
	}
	var tool *raftpb.SkillTool
	for _, t := range sk.Tools {
		if t.Id == h.Tool {
			tool = t
		}
	}
	if tool == nil {
		return d, fmt.Errorf("skill %s has no tool %s", h.SkillId, h.Tool)
	}
	input, _ := json.Marshal(map[string]any{"event": consensus.HookBeforeRun, "hook": h.Id, "job": desc})
	// The input is checked against the tool's input_schema, as a skill
	// run's is: a tool that does not take this input cannot decide.
	if err := skill.Validate(tool.InputSchema, input); err != nil {
		if de := (*skill.DocError)(nil); errors.As(err, &de) && !de.NotJSON {
			err = errors.New(de.Detail)
		}
		return d, fmt.Errorf("its input does not match the input_schema of %s/%s: %v", h.SkillId, h.Tool, err)
	}
	timeout := beforeRunTimeout
	if sk.WallClockMs > 0 {
		timeout = min(timeout, time.Duration(sk.WallClockMs)*time.Millisecond)
	}
	now := s.now().UnixMilli()
	mem := sk.MemoryBytes
	if mem == 0 {
		mem = DefaultMemory
	}
	g := consensus.ToolGrants(sk, tool)
	rec := &raftpb.JobRecord{
		Id: newJobID(), Kind: "wasm", ModuleSha256: tool.ModuleSha256, MemoryBytes: mem, Fuel: sk.Fuel, Input: input,
		InputSize: uint64(len(input)), TimeoutMs: timeout.Milliseconds(), Submitter: "hook:" + h.Id, SubmittedAtMs: now,
		DeadlineAtMs: now + 2*timeout.Milliseconds(), AllowHosts: g.HTTPHosts, AllowPrivate: g.AllowPrivate, SecretNames: g.Secrets, KvPrefix: g.KVPrefix,
		Deterministic: tool.Deterministic, OutputSchema: tool.OutputSchema, SkillId: sk.SkillId, SkillTool: tool.Id, HookId: h.Id,
	}
	if len(input) > consensus.InlineLimit {
		return d, fmt.Errorf("the job's description is %d bytes, over the inline bound", len(input))
	}
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{Job: rec}}}); err != nil {
		return d, err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*timeout)
	defer cancel()
	var j consensus.Job
	for {
		changed := st.Watch(consensus.TopicJob(rec.Id))
		var ok bool
		if j, ok = st.Job(rec.Id); ok && j.Phase.Terminal() {
			break
		}
		select {
		case <-changed:
		case <-wctx.Done():
			return d, fmt.Errorf("its job %s did not end in %s", rec.Id, 2*timeout)
		}
	}
	if j.Phase != consensus.PhaseCompleted {
		msg := j.Phase.String()
		if j.Error != nil {
			msg += ": " + j.Error.Message
			switch {
			case j.Error.Code == "timeout" || j.Error.Code == "expired":
				// Not the submitter's --timeout: the hook's own bound.
				msg += fmt.Sprintf(" (a before_run hook runs for at most %s: the skill's wall_clock_ms, up to %s)", timeout, beforeRunTimeout)
			case j.Error.Hint != "":
				msg += " (" + j.Error.Hint + ")"
			}
		}
		return d, fmt.Errorf("its job %s ended %s", j.ID, msg)
	}
	out := j.Stdout
	if j.StdoutHash != "" && s.Artifacts != nil {
		b, err := s.Artifacts.Get(j.StdoutHash)
		if err != nil {
			return d, err
		}
		out = b
	}
	if err := json.Unmarshal(out, &d); err != nil || !slices.Contains(hookDecisions, d.Decision) {
		return d, fmt.Errorf(`its output is not {"decision": one of %s}`, strings.Join(hookDecisions, ", "))
	}
	return d, nil
}

// sampleHookInput is an input of the shape a hook bound to event gets, with
// its optional fields filled, to check a tool's input_schema at bind time.
func sampleHookInput(event string) []byte {
	if event == consensus.HookBeforeRun {
		b, _ := json.Marshal(map[string]any{"event": event, "hook": "h-00000000", "job": map[string]any{
			"kind": "wasm", "submitter": "device:d-00000000", "module_sha256": strings.Repeat("0", 64), "input_size": 0,
			"allow_hosts": []string(nil), "allow_private": false, "secrets": []string(nil), "kv_prefix": "",
			"skill_id": "", "skill_tool": "", "tasks": 1,
		}})
		return b
	}
	// As consensus fires them (skillEventHooks, fireHooks).
	ev := consensus.HookEvent{Event: event, Hook: "h-00000000", AtMS: 1, Subject: "example.skill"}
	switch event {
	case consensus.HookAfterRun:
		ev.Subject = ""
		ev.Job = &consensus.HookJob{ID: "j-0000000000000000", Phase: "completed", Kind: "wasm", Submitter: "device:d-00000000", ExitCode: new(int32)}
	case consensus.HookSkillInstalled:
		ev.Detail = map[string]any{"version": "1.0.0"}
	case consensus.HookSkillQuarantined:
		ev.Detail = map[string]any{"findings": []string{"operator: sample"}, "reason": "sample"}
	case consensus.HookSkillEnabled, consensus.HookSkillDisabled:
		ev.Detail = map[string]any{"reason": "sample"}
	case consensus.HookNodeJoined:
		ev.Subject = "n-00000000"
	}
	b, _ := json.Marshal(ev)
	return b
}
