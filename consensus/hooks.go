package consensus

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Hook events.
const (
	HookBeforeRun        = "before_run"
	HookAfterRun         = "after_run"
	HookSkillInstalled   = "skill:installed"
	HookSkillEnabled     = "skill:enabled"
	HookSkillDisabled    = "skill:disabled"
	HookSkillQuarantined = "skill:quarantined"
	HookNodeJoined       = "node:joined"
)

// HookEvents lists the events a hook may be bound to.
var HookEvents = []string{HookBeforeRun, HookAfterRun, HookSkillInstalled, HookSkillEnabled, HookSkillDisabled, HookSkillQuarantined, HookNodeJoined}

// MaxHooks bounds the bindings.
const MaxHooks = 256

// HookRules is the version of the rules on hooks. An entry carries the
// version it was proposed under (HookCommand.rules for a bind,
// Command.hook_rules for the hook jobs an entry queues), and one written
// before a version replays as it applied then.
const HookRules = hookRulesExitNull

const (
	// hookRulesUniqueBind: a binding of an (event, skill, tool) already
	// bound is refused here, not only by the API node that proposed it (two
	// binds racing through two nodes both passed that check, and the tool
	// then ran twice per event).
	hookRulesUniqueBind = 1
	// hookRulesExitNull: an after_run input says exit_code null for a job
	// whose guest never exited (cancelled, expired, timed out, trapped...),
	// as the API does; before, it said 0, which a hook could take for a
	// success.
	hookRulesExitNull = 2
)

// hookBinding is the hook binding event to skill's tool, if any.
func (s *State) hookBinding(event, skillID, tool string) *raftpb.HookRecord {
	for _, id := range sortedKeys(s.data.hooks) { // at most MaxHooks
		if h := s.data.hooks[id]; h.Event == event && h.SkillId == skillID && h.Tool == tool {
			return h
		}
	}
	return nil
}

// applyHook binds or unbinds a hook.
func (s *State) applyHook(c *raftpb.HookCommand) ApplyResult {
	switch {
	case c.Bind != nil:
		h := proto.Clone(c.Bind).(*raftpb.HookRecord)
		if h.Id == "" || h.SkillId == "" || h.Tool == "" || !validEvent(h.Event) {
			return ApplyResult{Err: errf(ErrInvalid, "events: "+strings.Join(HookEvents, ", "), "bad hook binding")}
		}
		// The skill must be active with the tool, here and not only on the
		// API node: a disable or remove committed since would otherwise
		// leave this hook dangling (see unbindSkillHooks).
		sk, ok := s.data.skills[h.SkillId]
		switch {
		case !ok:
			return ApplyResult{Err: errf(ErrNotFound, "list them with 'palyra skill list'", "no skill %q is installed", h.SkillId)}
		case !slices.ContainsFunc(sk.Tools, func(t *raftpb.SkillTool) bool { return t.Id == h.Tool }):
			return ApplyResult{Err: errf(ErrNotFound, "see its tools with 'palyra skill get "+h.SkillId+"'", "skill %s has no tool %q", h.SkillId, h.Tool)}
		case sk.Status != SkillActive:
			return ApplyResult{Err: errf(ErrConflict, "enable it first: 'palyra skill enable "+h.SkillId+"'",
				"skill %s is %s: a hook bound to it could not run", h.SkillId, SkillStatusName(sk.Status))}
		}
		if _, ok := s.data.hooks[h.Id]; ok {
			return ApplyResult{Err: errf(ErrConflict, "", "hook %s exists", h.Id)}
		}
		if c.Rules >= hookRulesUniqueBind {
			if d := s.hookBinding(h.Event, h.SkillId, h.Tool); d != nil {
				return ApplyResult{Err: errf(ErrConflict, "see the hooks with 'palyra hook list'",
					"hook %s binds %s to %s/%s already", d.Id, h.Event, h.SkillId, h.Tool)}
			}
		}
		if len(s.data.hooks) >= MaxHooks {
			return ApplyResult{Err: errf(ErrInvalid, "unbind unused hooks", "the cluster holds %d hooks, its limit", MaxHooks)}
		}
		h.AtMs, h.By = c.AtMs, c.By
		s.data.hooks[h.Id] = h
	case c.Unbind != "":
		if _, ok := s.data.hooks[c.Unbind]; !ok {
			return ApplyResult{Err: errf(ErrNotFound, "list them with 'palyra hook list'", "no hook %q", c.Unbind)}
		}
		delete(s.data.hooks, c.Unbind)
	default:
		return ApplyResult{Err: errf(ErrInvalid, "", "empty hook command")}
	}
	return ApplyResult{}
}

func validEvent(e string) bool {
	for _, v := range HookEvents {
		if v == e {
			return true
		}
	}
	return false
}

// hooksFor lists the hooks bound to event, by id.
func (s *State) hooksFor(event string) []*raftpb.HookRecord {
	var out []*raftpb.HookRecord
	for _, id := range sortedKeys(s.data.hooks) {
		if h := s.data.hooks[id]; h.Event == event {
			out = append(out, h)
		}
	}
	return out
}

// Hooks lists every binding by id (copies).
func (s *State) Hooks() []*raftpb.HookRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*raftpb.HookRecord, 0, len(s.data.hooks))
	for _, id := range sortedKeys(s.data.hooks) {
		out = append(out, proto.Clone(s.data.hooks[id]).(*raftpb.HookRecord))
	}
	return out
}

// HooksFor lists the hooks bound to event (copies).
func (s *State) HooksFor(event string) []*raftpb.HookRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*raftpb.HookRecord
	for _, h := range s.hooksFor(event) {
		out = append(out, proto.Clone(h).(*raftpb.HookRecord))
	}
	return out
}

// HookEvent is the input a hook job gets: the event and its subject.
type HookEvent struct {
	Event   string         `json:"event"`
	Hook    string         `json:"hook"`
	AtMS    int64          `json:"at_ms"`
	Job     *HookJob       `json:"job,omitempty"`
	Subject string         `json:"subject,omitempty"`
	Detail  map[string]any `json:"detail,omitempty"`
}

// HookJob is what an after_run hook learns of the finished job.
type HookJob struct {
	ID        string `json:"id"`
	Phase     string `json:"phase"`
	Kind      string `json:"kind"`
	Submitter string `json:"submitter"`
	// ExitCode is the guest's exit status, nil (null) when it never
	// exited; entries from before hookRulesExitNull always set it.
	ExitCode   *int32 `json:"exit_code"`
	Error      string `json:"error,omitempty"`
	FuelUsed   uint64 `json:"fuel_used"`
	StdoutSize uint64 `json:"stdout_size"`
	SkillID    string `json:"skill_id,omitempty"`
	SkillTool  string `json:"skill_tool,omitempty"`
}

// fireHooks queues, in the entry being applied, one job per hook bound to
// event: the tool's module with the skill's grants, the event as its
// input. Ids are derived from the hook and the subject, so every replica
// makes the same jobs and a subject fires each hook once. Hooks whose
// skill is not installed and active are skipped (the journal says so).
func (s *State) fireHooks(index uint64, event, subject string, ev HookEvent) {
	for _, h := range s.hooksFor(event) {
		id := "hk-" + h.Id + "-" + subject
		if _, dup := s.jobs[id]; dup {
			continue
		}
		sk := s.data.skills[h.SkillId]
		var tool *raftpb.SkillTool
		if sk != nil {
			for _, t := range sk.Tools {
				if t.Id == h.Tool {
					tool = t
				}
			}
		}
		if sk == nil || tool == nil || sk.Status != SkillActive || tool.RequiresApproval {
			s.audit(s.clockMS, "hook:"+h.Id, "hook.skipped", "hook:"+h.Id, "event "+event+" on "+subject+": the hook's skill tool is not installed and active")
			continue
		}
		ev.Hook, ev.AtMS = h.Id, s.clockMS
		input, _ := json.Marshal(ev) // struct fields in order: deterministic
		if len(input) > InlineLimit {
			input = input[:0]
			ev.Detail = nil
			input, _ = json.Marshal(ev)
		}
		timeout := sk.WallClockMs
		if timeout <= 0 {
			timeout = 60_000
		}
		mem := sk.MemoryBytes
		if mem == 0 {
			mem = 64 << 20
		}
		g := ToolGrants(sk, tool)
		j := Job{
			ID: id, Phase: PhaseQueued, Kind: "wasm", ModuleHash: tool.ModuleSha256, MemoryBytes: mem, Fuel: sk.Fuel,
			Input: input, InputSize: uint64(len(input)), TimeoutMS: timeout, Submitter: "hook:" + h.Id,
			SubmittedAtMS: s.clockMS, CommitIndex: index, AllowHosts: g.HTTPHosts, AllowPrivate: g.AllowPrivate, SecretNames: g.Secrets, KVPrefix: g.KVPrefix,
			Deterministic: tool.Deterministic, OutputSchema: tool.OutputSchema, InputSchema: tool.InputSchema, SkillID: sk.SkillId, SkillTool: tool.Id, HookID: h.Id,
		}
		s.put(nil, &j)
	}
}

// fireEndedHooks runs after_run hooks for the jobs that ended in this
// entry (not for hook jobs, and not for each task of an array), with
// their input built under the entry's hook rules.
func (s *State) fireEndedHooks(index uint64, rules uint32) {
	ended := s.ended
	s.ended = nil
	if len(ended) == 0 {
		return
	}
	for _, id := range ended {
		j := s.jobs[id]
		if j == nil {
			continue
		}
		hj := &HookJob{ID: j.ID, Phase: j.Phase.String(), Kind: j.Kind, Submitter: j.Submitter,
			FuelUsed: j.FuelUsed, StdoutSize: j.StdoutSize, SkillID: j.SkillID, SkillTool: j.SkillTool}
		if rules < hookRulesExitNull || guestExited(j) {
			code := j.ExitCode
			hj.ExitCode = &code
		}
		if hj.StdoutSize == 0 {
			hj.StdoutSize = uint64(len(j.Stdout))
		}
		if j.Error != nil {
			hj.Error = j.Error.Code + ": " + j.Error.Message
		}
		s.fireHooks(index, HookAfterRun, j.ID, HookEvent{Event: HookAfterRun, Job: hj})
	}
}

// guestExited reports whether j's guest exited, so its ExitCode means
// something: it completed (0), or failed with the code it exited with.
// The API decides exit_code the same way (cli's exitCode).
func guestExited(j *Job) bool {
	return j.Phase == PhaseCompleted || (j.Phase == PhaseFailed && j.Error != nil && j.Error.Code == jobErrExitCode)
}

// jobErrExitCode is the code of a job's error when its guest exited with
// a non-zero status (runtime.ReasonExitCode).
const jobErrExitCode = "exit_code"

// skillEventHooks fires the system-event hooks of a skill command. The
// subject names the event (skill, package or time) so each fires once.
func (s *State) skillEventHooks(index uint64, c *raftpb.SkillCommand) {
	switch {
	case c.Install != nil:
		id, pkg := c.Install.SkillId, c.Install.PackageSha256
		pkg = pkg[:min(12, len(pkg))]
		if r := s.data.skills[id]; r != nil && r.Status == SkillQuarantined {
			s.fireHooks(index, HookSkillQuarantined, "q-"+id+"-"+pkg,
				HookEvent{Event: HookSkillQuarantined, Subject: id, Detail: map[string]any{"findings": c.Install.Findings}})
		}
		s.fireHooks(index, HookSkillInstalled, "i-"+id+"-"+pkg,
			HookEvent{Event: HookSkillInstalled, Subject: id, Detail: map[string]any{"version": c.Install.Version}})
	case c.SetStatusId != "":
		ev := map[uint32]string{SkillActive: HookSkillEnabled, SkillDisabled: HookSkillDisabled, SkillQuarantined: HookSkillQuarantined}[c.Status]
		if ev != "" {
			s.fireHooks(index, ev, "s-"+c.SetStatusId+"-"+strconv.FormatInt(c.AtMs, 10),
				HookEvent{Event: ev, Subject: c.SetStatusId, Detail: map[string]any{"reason": c.Reason}})
		}
	}
}
