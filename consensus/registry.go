package consensus

import (
	"crypto/subtle"
	"fmt"
	"sort"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// PairingState is a pairing code's lifecycle state (persisted values).
type PairingState uint32

// Pairing states.
const (
	PairingPending PairingState = 1
	PairingUsed    PairingState = 2
	PairingRevoked PairingState = 3
)

func (s PairingState) String() string {
	switch s {
	case PairingPending:
		return "pending"
	case PairingUsed:
		return "used"
	case PairingRevoked:
		return "revoked"
	}
	return "unknown"
}

// maxPairingFailures wrong secrets revoke a code: with online guessing
// also rate-limited, a code cannot be brute-forced.
const maxPairingFailures = 5

// tokenRetentionMS is how long used CA token ids are remembered: longer
// than a token's validity (5 minutes) plus clock leeway.
const tokenRetentionMS = 15 * 60 * 1000

// Pairing is a one-time pairing code as the cluster keeps it.
type Pairing struct {
	ID          string
	Kind        string // "node" | "device"
	Name        string
	Operator    bool
	SecretHash  []byte
	CreatedAtMS int64
	ExpiresAtMS int64
	CreatedBy   string
	State       PairingState
	UsedBy      string
	UsedAtMS    int64
	Failures    uint32
}

// Member is a node or device registered with the cluster.
type Member struct {
	Kind        string // "node" | "device"
	ID          string
	Name        string
	Operator    bool
	Labels      map[string]string
	AddedAtMS   int64
	AddedBy     string
	Revoked     bool
	RevokedAtMS int64
	RevokedBy   string
	// Scheduling: an ineligible or draining node gets no new work; at the
	// drain deadline its running work moves elsewhere.
	Ineligible      bool
	Draining        bool
	DrainDeadlineMS int64
}

// Principal is "kind:id", the string form used in job records and policy.
func (m Member) Principal() string { return m.Kind + ":" + m.ID }

// Policy is the stored Cedar policy set.
type Policy struct {
	Source  []byte
	Version uint64
	SetAtMS int64
	SetBy   string
}

// identityState is the part of State holding the identity plane.
type identityState struct {
	pairings       map[string]*Pairing
	members        map[string]*Member // key "kind:id"
	usedTokens     map[string]int64   // token id → at ms
	revokedSerials map[string]bool
	policy         Policy
	trust          trustState
	ledger         certLedger
}

func newIdentityState() identityState {
	return identityState{pairings: map[string]*Pairing{}, members: map[string]*Member{},
		usedTokens: map[string]int64{}, revokedSerials: map[string]bool{},
		ledger: newCertLedger()}
}

func pairingFromPB(r *raftpb.PairingRecord) Pairing {
	return Pairing{ID: r.Id, Kind: r.Kind, Name: r.Name, Operator: r.Operator, SecretHash: r.SecretHash,
		CreatedAtMS: r.CreatedAtMs, ExpiresAtMS: r.ExpiresAtMs, CreatedBy: r.CreatedBy,
		State: PairingState(r.State), UsedBy: r.UsedBy, UsedAtMS: r.UsedAtMs, Failures: r.Failures}
}

func pairingToPB(p *Pairing) *raftpb.PairingRecord {
	return &raftpb.PairingRecord{Id: p.ID, Kind: p.Kind, Name: p.Name, Operator: p.Operator, SecretHash: p.SecretHash,
		CreatedAtMs: p.CreatedAtMS, ExpiresAtMs: p.ExpiresAtMS, CreatedBy: p.CreatedBy,
		State: uint32(p.State), UsedBy: p.UsedBy, UsedAtMs: p.UsedAtMS, Failures: p.Failures}
}

func memberFromPB(r *raftpb.Member) Member {
	m := Member{Kind: r.Kind, ID: r.Id, Name: r.Name, Operator: r.Operator, AddedAtMS: r.AddedAtMs,
		AddedBy: r.AddedBy, Revoked: r.Revoked, RevokedAtMS: r.RevokedAtMs, RevokedBy: r.RevokedBy,
		Ineligible: r.Ineligible, Draining: r.Draining, DrainDeadlineMS: r.DrainDeadlineMs}
	if len(r.Labels) > 0 {
		m.Labels = make(map[string]string, len(r.Labels))
		for k, v := range r.Labels {
			m.Labels[k] = v
		}
	}
	return m
}

func memberToPB(m *Member) *raftpb.Member {
	return &raftpb.Member{Kind: m.Kind, Id: m.ID, Name: m.Name, Operator: m.Operator, AddedAtMs: m.AddedAtMS,
		AddedBy: m.AddedBy, Revoked: m.Revoked, RevokedAtMs: m.RevokedAtMS, RevokedBy: m.RevokedBy, Labels: m.Labels,
		Ineligible: m.Ineligible, Draining: m.Draining, DrainDeadlineMs: m.DrainDeadlineMS}
}

// MemberPB converts a member to its log form (to build commands).
func MemberPB(m *Member) *raftpb.Member { return memberToPB(m) }

// PairingPB converts a pairing to its log form (to build commands).
func PairingPB(p *Pairing) *raftpb.PairingRecord { return pairingToPB(p) }

func validKind(k string) bool { return k == "node" || k == "device" }

// apply functions; the caller holds s.mu -----------------------------------

func (s *State) applyCreatePairing(c *raftpb.CreatePairing) ApplyResult {
	r := c.GetPairing()
	if r == nil || r.Id == "" || len(r.SecretHash) != 32 || !validKind(r.Kind) {
		return ApplyResult{Err: errf(ErrInvalid, "", "malformed pairing record")}
	}
	if _, ok := s.id.pairings[r.Id]; ok {
		return ApplyResult{Err: errf(ErrConflict, "create another code", "pairing id %s already exists", r.Id)}
	}
	p := pairingFromPB(r)
	p.State = PairingPending
	p.Failures = 0
	s.id.pairings[p.ID] = &p
	return ApplyResult{}
}

func ago(ms int64) string {
	d := ms / 1000
	switch {
	case d < 60:
		return fmt.Sprintf("%ds", d)
	case d < 3600:
		return fmt.Sprintf("%dm", d/60)
	}
	return fmt.Sprintf("%dh", d/3600)
}

func (s *State) applyConsumePairing(c *raftpb.ConsumePairing) ApplyResult {
	p, ok := s.id.pairings[c.Id]
	if !ok {
		return ApplyResult{Err: errf(ErrNotFound, "check the code, or create a new code with 'palyra pair create'", "no pairing code with id %s in this cluster", c.Id)}
	}
	createHint := "create a new code with 'palyra pair create --kind " + p.Kind + "'"
	switch p.State {
	case PairingUsed:
		// Who used it is said only to whoever holds the whole code: the
		// public id alone (from an old screenshot, say) tells nothing more.
		by := ""
		if subtle.ConstantTimeCompare(c.PresentedSecretHash, p.SecretHash) == 1 {
			by = " (by " + p.UsedBy + ")"
		}
		return ApplyResult{Err: errf(ErrConflict, createHint, "pairing code %s was already used%s; codes work once", p.ID, by)}
	case PairingRevoked:
		return ApplyResult{Err: errf(ErrConflict, createHint, "pairing code %s was revoked", p.ID)}
	}
	if c.AtMs >= p.ExpiresAtMS {
		return ApplyResult{Err: errf(ErrConflict, createHint, "pairing code %s expired %s ago", p.ID, ago(c.AtMs-p.ExpiresAtMS))}
	}
	if subtle.ConstantTimeCompare(c.PresentedSecretHash, p.SecretHash) != 1 {
		// A wrong secret counts even in a dry run: that is the attempt.
		p.Failures++
		if p.Failures >= maxPairingFailures {
			p.State = PairingRevoked
			return ApplyResult{Err: errf(ErrInvalid, createHint, "wrong secret for pairing code %s; too many attempts, the code is now revoked", p.ID)}
		}
		return ApplyResult{Err: errf(ErrInvalid, "check that the code was typed completely and correctly", "wrong secret for pairing code %s", p.ID)}
	}
	m := c.GetMember()
	if m == nil || m.Id == "" || m.Kind != p.Kind {
		return ApplyResult{Err: errf(ErrInvalid, "", "pairing code %s is for a %s, not a %s", p.ID, p.Kind, m.GetKind())}
	}
	key := m.Kind + ":" + m.Id
	if _, exists := s.id.members[key]; exists {
		return ApplyResult{Err: errf(ErrConflict, "retry: a fresh id is generated on each attempt", "%s is already a member", key)}
	}
	op := c.GetLocalOperator()
	if op != nil {
		// Any node may be promoted to voter and then holds the CA key: its
		// machine is trusted with the cluster already, so a node code
		// always grants one.
		if p.Kind != "node" {
			return ApplyResult{Err: errf(ErrInvalid, "", "pairing code %s is for a %s; only joining nodes get a local operator", p.ID, p.Kind)}
		}
		if op.Kind != "device" || op.Id == "" {
			return ApplyResult{Err: errf(ErrInvalid, "", "malformed local operator")}
		}
		if _, exists := s.id.members["device:"+op.Id]; exists {
			return ApplyResult{Err: errf(ErrConflict, "retry: a fresh id is generated on each attempt", "device:%s is already a member", op.Id)}
		}
	}
	if c.DryRun {
		return ApplyResult{}
	}
	p.State = PairingUsed
	p.UsedBy = key
	p.UsedAtMS = c.AtMs
	nm := memberFromPB(m)
	nm.Operator = p.Operator && nm.Kind == "device"
	nm.AddedAtMS = c.AtMs
	nm.AddedBy = "pairing:" + p.ID
	if nm.Name == "" {
		nm.Name = p.Name
	}
	s.id.members[key] = &nm
	if op != nil {
		om := memberFromPB(op)
		om.Operator = true
		om.AddedAtMS = c.AtMs
		om.AddedBy = "pairing:" + p.ID
		om.Name = "local operator on " + m.Id
		s.id.members["device:"+op.Id] = &om
	}
	return ApplyResult{}
}

func (s *State) applyRevokePairing(c *raftpb.RevokePairing) ApplyResult {
	p, ok := s.id.pairings[c.Id]
	if !ok {
		return ApplyResult{Err: errf(ErrNotFound, "list codes with 'palyra pair list'", "no pairing code with id %s", c.Id)}
	}
	if p.State != PairingPending {
		return ApplyResult{Err: errf(ErrConflict, "", "pairing code %s is already %s", p.ID, p.State)}
	}
	p.State = PairingRevoked
	return ApplyResult{}
}

func (s *State) applyAddMember(c *raftpb.AddMember) ApplyResult {
	m := c.GetMember()
	if m == nil || m.Id == "" || !validKind(m.Kind) {
		return ApplyResult{Err: errf(ErrInvalid, "", "malformed member")}
	}
	key := m.Kind + ":" + m.Id
	if old, ok := s.id.members[key]; ok {
		if old.Revoked {
			return ApplyResult{Err: errf(ErrConflict, "", "%s was revoked and cannot be re-added", key)}
		}
		// Idempotent re-registration (e.g. a restarted init node) updates labels.
		old.Labels = memberFromPB(m).Labels
		return ApplyResult{}
	}
	nm := memberFromPB(m)
	s.id.members[key] = &nm
	return ApplyResult{}
}

func (s *State) applyRevokeMember(c *raftpb.RevokeMember) ApplyResult {
	key := c.Kind + ":" + c.Id
	m, ok := s.id.members[key]
	if !ok {
		return ApplyResult{Err: errf(ErrNotFound, "list them with 'palyra device list' or 'palyra nodes'", "no %s with id %s", c.Kind, c.Id)}
	}
	if m.Revoked {
		return ApplyResult{Err: errf(ErrConflict, "", "%s is already revoked", key)}
	}
	m.Revoked, m.RevokedAtMS, m.RevokedBy = true, c.AtMs, c.By
	return ApplyResult{}
}

func (s *State) applyUseToken(c *raftpb.UseToken) ApplyResult {
	for id, at := range s.id.usedTokens { // order-independent pruning
		if at < c.AtMs-tokenRetentionMS {
			delete(s.id.usedTokens, id)
		}
	}
	if c.Id == "" {
		return ApplyResult{Err: errf(ErrInvalid, "", "empty token id")}
	}
	if _, used := s.id.usedTokens[c.Id]; used {
		return ApplyResult{Err: errf(ErrConflict, "", "one-time token %s was already used", c.Id)}
	}
	s.id.usedTokens[c.Id] = c.AtMs
	return ApplyResult{}
}

func (s *State) applyRevokeCert(c *raftpb.RevokeCert) ApplyResult {
	if c.Serial == "" {
		return ApplyResult{Err: errf(ErrInvalid, "", "empty serial")}
	}
	s.id.revokedSerials[c.Serial] = true
	return ApplyResult{}
}

func (s *State) applySetPolicy(c *raftpb.SetPolicy) ApplyResult {
	if len(c.Source) == 0 {
		return ApplyResult{Err: errf(ErrInvalid, "", "empty policy")}
	}
	s.id.policy = Policy{Source: c.Source, Version: s.id.policy.Version + 1, SetAtMS: c.AtMs, SetBy: c.By}
	return ApplyResult{}
}

// Reads ---------------------------------------------------------------------

// Pairings returns all pairing records sorted by creation time then id.
func (s *State) Pairings() []Pairing {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Pairing, 0, len(s.id.pairings))
	for _, p := range s.id.pairings {
		out = append(out, *p)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].CreatedAtMS != out[b].CreatedAtMS {
			return out[a].CreatedAtMS < out[b].CreatedAtMS
		}
		return out[a].ID < out[b].ID
	})
	return out
}

// Member returns the member kind:id.
func (s *State) Member(kind, id string) (Member, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.id.members[kind+":"+id]
	if !ok {
		return Member{}, false
	}
	return *m, true
}

// LocalOperatorsOf returns the local operator devices among devs made on
// node's machine, whose keys are on its disk: for a node that joined, the
// one its pairing made ("local operator on ID", by the same code); for the
// node that created the cluster ("init"), the init device registered right
// after it. The two init entries are a few milliseconds apart (each gets
// its proposer's clock: equal times, asked before, never matched), and
// after a snapshot restore an older init pair exists too, so that device
// is the one closest in time, within a minute.
func LocalOperatorsOf(devs []Member, node Member) []Member {
	var out []Member
	if node.AddedBy != "init" {
		for _, d := range devs {
			if d.Kind == "device" && d.Operator && node.AddedBy != "" && d.AddedBy == node.AddedBy && d.Name == "local operator on "+node.ID {
				out = append(out, d)
			}
		}
		return out
	}
	dist := func(d Member) int64 { return max(d.AddedAtMS-node.AddedAtMS, node.AddedAtMS-d.AddedAtMS) }
	best := -1
	for i, d := range devs {
		if d.Kind != "device" || !d.Operator || d.AddedBy != "init" || d.Name != "local operator" || dist(d) > 60_000 {
			continue
		}
		if best < 0 || dist(d) < dist(devs[best]) {
			best = i
		}
	}
	if best >= 0 {
		out = append(out, devs[best])
	}
	return out
}

// Members returns members of a kind ("" = all), sorted by kind then id.
func (s *State) Members(kind string) []Member {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Member
	for _, m := range s.id.members {
		if kind == "" || m.Kind == kind {
			out = append(out, *m)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Principal() < out[b].Principal() })
	return out
}

// IsRevoked reports whether principal kind:id is revoked. Unknown
// principals are not revoked (the CA decides who is known).
func (s *State) IsRevoked(kind, id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.id.members[kind+":"+id]
	return ok && m.Revoked
}

// IsSerialRevoked reports whether a certificate serial is revoked.
func (s *State) IsSerialRevoked(serial string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.id.revokedSerials[serial]
}

// TokenUsed reports whether a CA one-time token id was used.
func (s *State) TokenUsed(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.id.usedTokens[id]
	return ok
}

// Policy returns the stored policy (Version 0: none stored yet).
func (s *State) Policy() Policy {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.id.policy
}

// snapshotIdentity writes the identity plane into snap in a canonical order.
func (s *State) snapshotIdentity(snap *raftpb.Snapshot) {
	for _, id := range sortedKeys(s.id.pairings) {
		snap.Pairings = append(snap.Pairings, pairingToPB(s.id.pairings[id]))
	}
	for _, k := range sortedKeys(s.id.members) {
		snap.Members = append(snap.Members, memberToPB(s.id.members[k]))
	}
	for _, id := range sortedKeys(s.id.usedTokens) {
		snap.UsedTokens = append(snap.UsedTokens, &raftpb.UsedToken{Id: id, AtMs: s.id.usedTokens[id]})
	}
	snap.RevokedSerials = sortedKeys(s.id.revokedSerials)
	if s.id.policy.Version > 0 {
		p := s.id.policy
		snap.Policy = &raftpb.PolicyRecord{Source: p.Source, Version: p.Version, SetAtMs: p.SetAtMS, SetBy: p.SetBy}
	}
	s.snapshotTrust(snap)
	s.snapshotCertLedger(snap)
}

func (s *State) restoreIdentity(snap *raftpb.Snapshot) {
	s.id = newIdentityState()
	for _, r := range snap.Pairings {
		p := pairingFromPB(r)
		s.id.pairings[p.ID] = &p
	}
	for _, r := range snap.Members {
		m := memberFromPB(r)
		s.id.members[m.Principal()] = &m
	}
	for _, t := range snap.UsedTokens {
		s.id.usedTokens[t.Id] = t.AtMs
	}
	for _, sn := range snap.RevokedSerials {
		s.id.revokedSerials[sn] = true
	}
	if p := snap.Policy; p != nil {
		s.id.policy = Policy{Source: p.Source, Version: p.Version, SetAtMS: p.SetAtMs, SetBy: p.SetBy}
	}
	s.restoreTrust(snap)
	s.restoreCertLedger(snap)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (s *State) applyNodeSchedulable(c *raftpb.SetNodeSchedulable) ApplyResult {
	m, ok := s.id.members["node:"+c.Id]
	if !ok {
		return ApplyResult{Err: errf(ErrNotFound, "list nodes with 'palyra nodes'", "no node with id %s", c.Id)}
	}
	m.Ineligible = !c.Eligible
	m.Draining = c.Draining
	m.DrainDeadlineMS = c.DrainDeadlineMs
	if !c.Draining {
		m.DrainDeadlineMS = 0
	}
	// The node's worker watches its topic: it hands back what waits for
	// a slot there when the node stops taking work.
	s.touch(TopicNode(c.Id))
	return ApplyResult{}
}
