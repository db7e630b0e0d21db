package consensus

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

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
		if old, ok := d.skills[r.SkillId]; ok {
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
		s.skillBlobs(old, -1)
		delete(d.skills, c.RemoveId)
	default:
		return ApplyResult{Err: errf(ErrInvalid, "", "empty skill command")}
	}
	return ApplyResult{}
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
