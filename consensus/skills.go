package consensus

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// SkillRules is the version of the rules on skill installs and on runs of
// skills that are not active (installOver, abortSkillRuns, and the checks
// in applyAssign and applyDecide). Commands carry the version they were
// proposed under (rules); an entry written before these rules existed
// (0) replays as it applied then, so a restart after an upgrade rebuilds
// the same state its log made, not a different one.
const SkillRules = 1

// Skill statuses (SkillRecord.status).
const (
	SkillActive      uint32 = 1
	SkillDisabled    uint32 = 2
	SkillQuarantined uint32 = 3
)

// SkillStatusName is the wire name of a skill status.
func SkillStatusName(s uint32) string {
	switch s {
	case SkillActive:
		return "active"
	case SkillDisabled:
		return "disabled"
	case SkillQuarantined:
		return "quarantined"
	}
	return "unknown"
}

// ParseSkillStatus reads a status name (case-insensitive).
func ParseSkillStatus(s string) (uint32, bool) {
	switch strings.ToLower(s) {
	case "active":
		return SkillActive, true
	case "disabled":
		return SkillDisabled, true
	case "quarantined":
		return SkillQuarantined, true
	}
	return 0, false
}

// Limits of the skill registry.
const (
	MaxSkills     = 1_000
	MaxPublishers = 1_000
)

// applySkill changes the skill registry. The package was verified and
// audited where it entered the cluster; the FSM keeps the registry's own
// rules: a publisher's key is not replaced silently, an install must be
// signed by the publisher's trusted key, and a removed skill's blobs are
// no longer referenced.
func (s *State) applySkill(c *raftpb.SkillCommand) ApplyResult {
	d := &s.data
	switch {
	case c.Trust != nil:
		t := c.Trust
		if t.Name == "" || t.Key == "" {
			return ApplyResult{Err: errf(ErrInvalid, "give a publisher name and its ed25519:… key", "bad publisher record")}
		}
		if old, ok := d.publishers[t.Name]; ok && old.Key != t.Key && !c.ReplaceKey {
			return ApplyResult{Err: errf(ErrConflict, "replace it explicitly with --replace (packages signed with the old key then no longer install)",
				"publisher %s is trusted with another key (%s)", t.Name, old.Key)}
		}
		if _, ok := d.publishers[t.Name]; !ok && len(d.publishers) >= MaxPublishers {
			return ApplyResult{Err: errf(ErrInvalid, "remove unused publishers", "the cluster trusts %d publishers, its limit", MaxPublishers)}
		}
		d.publishers[t.Name] = &raftpb.PublisherRecord{Name: t.Name, Key: t.Key, AtMs: c.AtMs, By: c.By}
	case c.Untrust != "":
		if _, ok := d.publishers[c.Untrust]; !ok {
			return ApplyResult{Err: errf(ErrNotFound, "list them with 'palyra skill trust list'", "publisher %q is not trusted", c.Untrust)}
		}
		delete(d.publishers, c.Untrust)
	case c.Install != nil:
		r := proto.Clone(c.Install).(*raftpb.SkillRecord)
		pub, ok := d.publishers[r.Publisher]
		switch {
		case r.SkillId == "" || r.PackageSha256 == "" || len(r.Tools) == 0:
			return ApplyResult{Err: errf(ErrInvalid, "install a package with 'palyra skill install FILE'", "incomplete skill record")}
		case !ok:
			return ApplyResult{Err: errf(ErrPermissionDenied, "trust the publisher first: 'palyra skill trust add "+r.Publisher+" KEY' (or install with --trust-on-first-use)",
				"publisher %q is not trusted", r.Publisher)}
		case pub.Key != r.PublisherKey:
			return ApplyResult{Err: errf(ErrPermissionDenied, "a package signed by another key than the trusted one is refused; if the publisher changed keys, 'palyra skill trust add --replace'",
				"skill %s is signed with %s; publisher %s is trusted with %s", r.SkillId, r.PublisherKey, r.Publisher, pub.Key)}
		}
		if _, ok := d.skills[r.SkillId]; !ok && len(d.skills) >= MaxSkills {
			return ApplyResult{Err: errf(ErrInvalid, "remove unused skills", "the cluster holds %d skills, its limit", MaxSkills)}
		}
		if r.Status != SkillQuarantined {
			r.Status = SkillActive
		}
		r.InstalledAtMs, r.InstalledBy, r.StatusAtMs, r.StatusBy = c.AtMs, c.By, c.AtMs, c.By
		r.PreviousVersion = ""
		old, replacing := d.skills[r.SkillId]
		if replacing {
			if c.Rules >= SkillRules { // an earlier version's entry replaces as it did then
				if err := s.installOver(old, r, c); err != nil {
					return ApplyResult{Err: err}
				}
			}
			s.skillBlobs(old, -1)
		}
		d.skills[r.SkillId] = r
		s.skillBlobs(r, +1)
	case c.SetStatusId != "":
		old, ok := d.skills[c.SetStatusId]
		if !ok {
			return ApplyResult{Err: errf(ErrNotFound, "list them with 'palyra skill list'", "no skill %q", c.SetStatusId)}
		}
		if SkillStatusName(c.Status) == "unknown" {
			return ApplyResult{Err: errf(ErrInvalid, "use active, disabled or quarantined", "bad skill status %d", c.Status)}
		}
		if c.Status != SkillActive {
			if err := s.unbindSkillHooks(c.SetStatusId, SkillStatusName(c.Status), c); err != nil {
				return ApplyResult{Err: err}
			}
		}
		if c.Status == SkillQuarantined && c.Rules >= SkillRules {
			s.abortSkillRuns(c.SetStatusId, "quarantined", c)
		}
		r := proto.Clone(old).(*raftpb.SkillRecord)
		r.Status, r.StatusAtMs, r.StatusBy = c.Status, c.AtMs, c.By
		switch {
		case c.Status == SkillQuarantined && c.Reason != "":
			r.Findings = append(r.Findings, "operator: "+c.Reason)
		case c.Status == SkillActive:
			r.Findings = nil // enabling is the operator's decision over the findings
		}
		d.skills[r.SkillId] = r
	case c.RemoveId != "":
		old, ok := d.skills[c.RemoveId]
		if !ok {
			return ApplyResult{Err: errf(ErrNotFound, "list them with 'palyra skill list'", "no skill %q", c.RemoveId)}
		}
		if err := s.unbindSkillHooks(c.RemoveId, "removed", c); err != nil {
			return ApplyResult{Err: err}
		}
		if c.Rules >= SkillRules {
			s.abortSkillRuns(c.RemoveId, "removed", c)
		}
		s.skillBlobs(old, -1)
		delete(d.skills, c.RemoveId)
	default:
		return ApplyResult{Err: errf(ErrInvalid, "", "empty skill command")}
	}
	return ApplyResult{}
}

// installOver decides whether r may replace the installed skill old, and
// what it inherits. A skill id belongs to its publisher: a package from
// another publisher does not replace it (an operator removes the skill
// first), so trusting a second publisher never hands it the first one's
// skills, hooks included. A lower version is refused unless the command
// allows the downgrade; the same version must be the same package
// (versions are immutable). A status an operator set (disabled,
// quarantined) survives the upgrade: installing is not enabling. And the
// hooks bound to the skill must still be able to run: every bound tool
// must exist in the new version, and the new version must be active.
func (s *State) installOver(old, r *raftpb.SkillRecord, c *raftpb.SkillCommand) *Error {
	if old.Publisher != r.Publisher {
		return errf(ErrConflict,
			fmt.Sprintf("a skill id belongs to its publisher; if %s should replace it, an operator removes it first ('palyra skill remove %s'), else give the package another skill_id", r.Publisher, r.SkillId),
			"skill %s is published by %s (version %s installed); a package from %s does not replace it", r.SkillId, old.Publisher, old.Version, r.Publisher)
	}
	comparable := semver.IsValid("v"+r.Version) && semver.IsValid("v"+old.Version) // a record from before versions were checked may not be
	switch cmp := semver.Compare("v"+r.Version, "v"+old.Version); {
	case !comparable:
	case cmp < 0 && !c.AllowDowngrade:
		return errf(ErrConflict, "install with --allow-downgrade if you mean to go back",
			"skill %s %s is installed; %s would downgrade it", r.SkillId, old.Version, r.Version)
	case cmp == 0 && old.PackageSha256 != r.PackageSha256 && (r.ContentSha256 == "" || r.ContentSha256 != old.ContentSha256):
		// The same contents in another zip framing (a header byte changed,
		// the same files packed again) are the same version.
		return errf(ErrConflict, "publish the change as a new version (the version in skill.toml), or remove the skill first",
			"skill %s %s is installed from another package (sha256 %s); a version's contents do not change", r.SkillId, old.Version, short(old.PackageSha256))
	}
	r.PreviousVersion = old.Version
	if r.Version == old.Version { // the same package again: nothing replaced
		r.PreviousVersion = old.PreviousVersion
	}
	if old.Status != SkillActive && StatusSetByOperator(old) {
		// Keep the operator's decision (and reason) over the new package's.
		r.Status, r.StatusAtMs, r.StatusBy = old.Status, old.StatusAtMs, old.StatusBy
		for _, f := range old.Findings {
			if strings.HasPrefix(f, "operator: ") && !slices.Contains(r.Findings, f) {
				r.Findings = append(r.Findings, f)
			}
		}
	}
	var problems []string
	for _, id := range sortedKeys(s.data.hooks) {
		h := s.data.hooks[id]
		if h.SkillId != r.SkillId {
			continue
		}
		switch {
		case !slices.ContainsFunc(r.Tools, func(t *raftpb.SkillTool) bool { return t.Id == h.Tool }):
			problems = append(problems, fmt.Sprintf("%s (%s -> %s): version %s has no tool %s", id, h.Event, h.Tool, r.Version, h.Tool))
		case r.Status != SkillActive:
			problems = append(problems, fmt.Sprintf("%s (%s -> %s): version %s would be %s", id, h.Event, h.Tool, r.Version, SkillStatusName(r.Status)))
		}
	}
	if len(problems) > 0 {
		return errf(ErrConflict, "unbind them first ('palyra hook unbind HOOK_ID'), then install",
			"skill %s has hooks bound to it that could not run after this install: %s (a before_run hook would refuse every job)",
			r.SkillId, strings.Join(problems, "; "))
	}
	return nil
}

// Grants are the capabilities a run of one skill tool asks for.
type Grants struct {
	HTTPHosts    []string
	AllowPrivate bool
	Secrets      []string
	KVPrefix     string
}

// ToolGrants are what a run of tool t of skill r asks for: the tool's own
// capabilities when its manifest narrowed them, else the skill's. Records
// from before tools could narrow them have none, and keep the skill's.
func ToolGrants(r *raftpb.SkillRecord, t *raftpb.SkillTool) Grants {
	if g := t.GetGrants(); g != nil {
		return Grants{HTTPHosts: g.HttpHosts, AllowPrivate: g.AllowPrivate, Secrets: g.Secrets, KVPrefix: g.KvPrefix}
	}
	return Grants{HTTPHosts: r.HttpHosts, AllowPrivate: r.AllowPrivate, Secrets: r.Secrets, KVPrefix: r.KvPrefix}
}

// StatusSetByOperator reports whether a skill's status came from an
// operator's command (skill disable/quarantine) rather than its install.
func StatusSetByOperator(r *raftpb.SkillRecord) bool {
	if r.StatusAtMs != r.InstalledAtMs || r.StatusBy != r.InstalledBy {
		return true
	}
	return slices.ContainsFunc(r.Findings, func(f string) bool { return strings.HasPrefix(f, "operator: ") })
}

// skillUnavailable says why runs of skill id cannot start now: "" when it
// is installed and active, else what it is (disabled, quarantined,
// removed).
func (s *State) skillUnavailable(id string) string {
	sk, ok := s.data.skills[id]
	switch {
	case !ok:
		return "removed"
	case sk.Status != SkillActive:
		return SkillStatusName(sk.Status)
	}
	return ""
}

// endSkillRun ends a run whose skill stopped being runnable before or while
// it ran: aborted, saying what happened to the skill and how to go on.
func (s *State) endSkillRun(j *Job, why, by string, atMS int64) {
	n := *j
	n.Phase = PhaseAborted
	n.FinishedAtMS = atMS
	msg := fmt.Sprintf("skill %s is %s; the run did not start", j.SkillID, why)
	if j.Phase == PhaseRunning {
		msg = fmt.Sprintf("skill %s was %s by %s while the run was running; it was stopped", j.SkillID, why, by)
	}
	hint := "run it again once an operator enables the skill ('palyra skill enable " + j.SkillID + "')"
	if why == "removed" {
		hint = "install the skill again, then run it again"
	}
	n.Error = &JobError{Code: "skill_unavailable", Message: msg, Hint: hint}
	s.put(j, &n)
}

// abortSkillRuns stops the running runs of a skill being quarantined or
// removed (its code is no longer trusted, or no longer there). Queued runs
// end when the scheduler would place them (applyRound), runs waiting for
// approval cannot be approved (applyDecide). Running jobs are bounded by
// the cluster's slots, so this walks no history.
func (s *State) abortSkillRuns(id, why string, c *raftpb.SkillCommand) {
	var hit []*Job
	for _, node := range sortedKeys(s.idx.running) {
		byID := s.idx.running[node]
		for _, jid := range sortedKeys(byID) {
			if j := byID[jid]; j.SkillID == id {
				hit = append(hit, j)
			}
		}
	}
	for _, j := range hit {
		s.endSkillRun(j, why, c.By, c.AtMs)
	}
}

// unbindSkillHooks keeps hooks from outliving their skill. A skill that
// stops being active (disabled, quarantined, removed) would leave its
// hooks unable to run: a before_run hook then refuses every submission,
// an after_run or event hook is skipped. So the command is refused while
// hooks are bound to the skill, naming each and the fix, unless it lists
// every one of them in unbind_hooks (--force): then they are unbound in
// the same entry, each journaled. Deciding here rather than on the API
// node means a hook bound meanwhile cannot slip through: the bind is
// ordered before this command (and refused) or after it (and then this
// command does not list it).
func (s *State) unbindSkillHooks(skillID, becomes string, c *raftpb.SkillCommand) *Error {
	var bound, missing []string
	for _, id := range sortedKeys(s.data.hooks) {
		if h := s.data.hooks[id]; h.SkillId == skillID {
			bound = append(bound, id)
			if !slices.Contains(c.UnbindHooks, id) {
				missing = append(missing, id+" ("+h.Event+" -> "+h.Tool+")")
			}
		}
	}
	if len(missing) > 0 {
		verb := map[string]string{"disabled": "disable", "quarantined": "quarantine", "removed": "remove"}[becomes]
		return errf(ErrConflict,
			"unbind them first ('palyra hook unbind HOOK_ID' for each), or "+verb+" with --force, which unbinds them",
			"skill %s has hooks bound to it: %s; if it were %s, they could not run (a before_run hook would refuse every job)",
			skillID, strings.Join(missing, ", "), becomes)
	}
	for _, id := range bound {
		delete(s.data.hooks, id)
		s.audit(c.AtMs, c.By, "hook.unbind", "hook:"+id, "skill "+skillID+" "+becomes+" with --force")
	}
	return nil
}

// skillBlobs adds delta references to a skill's package and module blobs,
// so blob collection keeps them while the skill is installed.
func (s *State) skillBlobs(r *raftpb.SkillRecord, delta int) {
	hashes := []string{r.PackageSha256}
	for _, t := range r.Tools {
		hashes = append(hashes, t.ModuleSha256)
	}
	for _, h := range hashes {
		if h == "" {
			continue
		}
		if s.idx.blobRefs[h] += delta; s.idx.blobRefs[h] <= 0 {
			delete(s.idx.blobRefs, h)
		}
	}
}

// Skill returns an installed skill (a copy).
func (s *State) Skill(id string) (*raftpb.SkillRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.data.skills[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(r).(*raftpb.SkillRecord), true
}

// Skills lists installed skills by id (copies).
func (s *State) Skills() []*raftpb.SkillRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*raftpb.SkillRecord, 0, len(s.data.skills))
	for _, id := range sortedKeys(s.data.skills) {
		out = append(out, proto.Clone(s.data.skills[id]).(*raftpb.SkillRecord))
	}
	return out
}

// Publisher returns a trusted publisher's record.
func (s *State) Publisher(name string) (*raftpb.PublisherRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.data.publishers[name]
	if !ok {
		return nil, false
	}
	return proto.Clone(p).(*raftpb.PublisherRecord), true
}

// Publishers lists trusted publishers by name.
func (s *State) Publishers() []*raftpb.PublisherRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*raftpb.PublisherRecord, 0, len(s.data.publishers))
	for _, n := range sortedKeys(s.data.publishers) {
		out = append(out, proto.Clone(s.data.publishers[n]).(*raftpb.PublisherRecord))
	}
	return out
}

func (s *State) snapshotSkills(snap *raftpb.Snapshot) {
	for _, id := range sortedKeys(s.data.skills) {
		snap.Skills = append(snap.Skills, s.data.skills[id])
	}
	for _, n := range sortedKeys(s.data.publishers) {
		snap.Publishers = append(snap.Publishers, s.data.publishers[n])
	}
}

func (s *State) restoreSkills(snap *raftpb.Snapshot) {
	for _, r := range snap.Skills {
		s.data.skills[r.SkillId] = r
		s.skillBlobs(r, +1)
	}
	for _, p := range snap.Publishers {
		s.data.publishers[p.Name] = p
	}
}
