package consensus

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// RootState is a trust-bundle root's place in a CA rotation (persisted values).
type RootState uint32

// Root states.
const (
	// RootActive signs every new certificate; there is exactly one once
	// the bundle is initialised.
	RootActive RootState = 1
	// RootPending is a rotation's new root: trusted already, so the voters
	// can fetch its key and peers accept it, but it signs nothing yet.
	RootPending RootState = 2
	// RootRetiring is the root a rotation replaced: still trusted until
	// RetireAtMS, then dropped.
	RootRetiring RootState = 3
)

func (s RootState) String() string {
	switch s {
	case RootActive:
		return "active"
	case RootPending:
		return "pending"
	case RootRetiring:
		return "retiring"
	}
	return "unknown"
}

// TopicTrust changes whenever the trust bundle or a rotation request changes.
const TopicTrust = "trust"

// CARoot is one root of the cluster's trust bundle: public material only.
type CARoot struct {
	Fingerprint string // hex SHA-256 of DER
	DER         []byte
	State       RootState
	// CrossDER certifies this root's key under root CrossFrom, so peers
	// that trust only that root accept leaves of this one.
	CrossDER      []byte
	CrossFrom     string
	AddedAtMS     int64
	ActivatedAtMS int64
	RetireAtMS    int64
}

// CARotation is a requested rotation whose new root is not active yet.
type CARotation struct {
	RequestedAtMS int64
	OverlapMS     int64
	By            string
}

// TrustBundle is the replicated trust state: every root peers must accept
// (oldest first) and the rotation in progress, if any.
type TrustBundle struct {
	Roots    []CARoot
	Rotation *CARotation
}

// Active returns the active root (ok false before the bundle is initialised).
func (b TrustBundle) Active() (CARoot, bool) { return b.find(RootActive) }

// Pending returns a rotation's pending root, if there is one.
func (b TrustBundle) Pending() (CARoot, bool) { return b.find(RootPending) }

func (b TrustBundle) find(st RootState) (CARoot, bool) {
	for _, r := range b.Roots {
		if r.State == st {
			return r, true
		}
	}
	return CARoot{}, false
}

// Root returns the root with fingerprint fp.
func (b TrustBundle) Root(fp string) (CARoot, bool) {
	for _, r := range b.Roots {
		if r.Fingerprint == fp {
			return r, true
		}
	}
	return CARoot{}, false
}

// trustState is the part of identityState holding the trust bundle.
type trustState struct {
	roots    []*CARoot
	rotation *CARotation
}

// RootFingerprint is the fingerprint the bundle names a root by.
func RootFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

func (s *State) trustRoot(st RootState) *CARoot {
	for _, r := range s.id.trust.roots {
		if r.State == st {
			return r
		}
	}
	return nil
}

const rotateHint = "see 'palyra ca status'"

func (s *State) applyCATrust(c *raftpb.CATrust) ApplyResult {
	t := &s.id.trust
	active := s.trustRoot(RootActive)
	switch op := c.Op.(type) {
	case *raftpb.CATrust_Init:
		if len(t.roots) > 0 {
			return ApplyResult{Err: errf(ErrConflict, "", "the trust bundle is already initialised")}
		}
		if len(op.Init.GetDer()) == 0 {
			return ApplyResult{Err: errf(ErrInvalid, "", "no root certificate")}
		}
		t.roots = []*CARoot{{Fingerprint: RootFingerprint(op.Init.Der), DER: op.Init.Der, State: RootActive,
			AddedAtMS: c.AtMs, ActivatedAtMS: c.AtMs}}
	case *raftpb.CATrust_Request:
		if active == nil {
			return ApplyResult{Err: errf(ErrConflict, "wait until the cluster has finished starting", "the cluster has no CA root recorded yet")}
		}
		if t.rotation != nil {
			return ApplyResult{Err: errf(ErrConflict, "wait for it to finish; "+rotateHint, "a CA rotation requested at %s is in progress",
				time.UnixMilli(t.rotation.RequestedAtMS).UTC().Format(time.RFC3339))}
		}
		if r := s.trustRoot(RootRetiring); r != nil {
			return ApplyResult{Err: errf(ErrConflict, "rotate again after that; "+rotateHint, "the previous root %s is still trusted until %s",
				short(r.Fingerprint), time.UnixMilli(r.RetireAtMS).UTC().Format(time.RFC3339))}
		}
		if op.Request.GetOverlapMs() <= 0 {
			return ApplyResult{Err: errf(ErrInvalid, "", "rotation overlap must be positive")}
		}
		t.rotation = &CARotation{RequestedAtMS: c.AtMs, OverlapMS: op.Request.OverlapMs, By: c.By}
	case *raftpb.CATrust_Pending:
		p := op.Pending
		if t.rotation == nil {
			return ApplyResult{Err: errf(ErrConflict, "", "no CA rotation was requested")}
		}
		if len(p.GetDer()) == 0 || len(p.CrossDer) == 0 || active == nil || p.CrossFrom != active.Fingerprint {
			return ApplyResult{Err: errf(ErrInvalid, "", "a pending root needs its certificate and a cross-certificate from the active root")}
		}
		kept := t.roots[:0]
		for _, r := range t.roots {
			if r.State != RootPending { // a newer pending root replaces a lost one
				kept = append(kept, r)
			}
		}
		t.roots = append(kept, &CARoot{Fingerprint: RootFingerprint(p.Der), DER: p.Der, State: RootPending,
			CrossDER: p.CrossDer, CrossFrom: p.CrossFrom, AddedAtMS: c.AtMs})
	case *raftpb.CATrust_Activate:
		pending := s.trustRoot(RootPending)
		if pending == nil || t.rotation == nil || pending.Fingerprint != op.Activate.GetFingerprint() {
			return ApplyResult{Err: errf(ErrConflict, "", "root %s is not the pending root", short(op.Activate.GetFingerprint()))}
		}
		if active != nil {
			active.State, active.RetireAtMS = RootRetiring, c.AtMs+t.rotation.OverlapMS
		}
		pending.State, pending.ActivatedAtMS = RootActive, c.AtMs
		t.rotation = nil
	case *raftpb.CATrust_Drop:
		fp := op.Drop.GetFingerprint()
		kept := t.roots[:0]
		found := false
		for _, r := range t.roots {
			if r.Fingerprint == fp {
				if r.State != RootRetiring || c.AtMs < r.RetireAtMS {
					return ApplyResult{Err: errf(ErrConflict, "", "root %s is %s and cannot be dropped now", short(fp), r.State)}
				}
				found = true
				continue
			}
			kept = append(kept, r)
		}
		if !found {
			return ApplyResult{Err: errf(ErrNotFound, "", "no root %s in the trust bundle", short(fp))}
		}
		t.roots = kept
	default:
		return ApplyResult{Err: errf(ErrInvalid, "upgrade this node to the cluster's version", "unknown trust operation %T", c.Op)}
	}
	s.touch(TopicTrust)
	return ApplyResult{}
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// Trust returns a copy of the trust bundle.
func (s *State) Trust() TrustBundle {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var b TrustBundle
	for _, r := range s.id.trust.roots {
		b.Roots = append(b.Roots, *r)
	}
	if r := s.id.trust.rotation; r != nil {
		rc := *r
		b.Rotation = &rc
	}
	return b
}

func (s *State) snapshotTrust(snap *raftpb.Snapshot) {
	for _, r := range s.id.trust.roots {
		snap.CaRoots = append(snap.CaRoots, &raftpb.CARootRecord{Fingerprint: r.Fingerprint, Der: r.DER, State: uint32(r.State),
			CrossDer: r.CrossDER, CrossFrom: r.CrossFrom, AddedAtMs: r.AddedAtMS, ActivatedAtMs: r.ActivatedAtMS, RetireAtMs: r.RetireAtMS})
	}
	if r := s.id.trust.rotation; r != nil {
		snap.CaRotation = &raftpb.CARotationRecord{RequestedAtMs: r.RequestedAtMS, OverlapMs: r.OverlapMS, By: r.By}
	}
}

func (s *State) restoreTrust(snap *raftpb.Snapshot) {
	for _, r := range snap.CaRoots {
		s.id.trust.roots = append(s.id.trust.roots, &CARoot{Fingerprint: r.Fingerprint, DER: r.Der, State: RootState(r.State),
			CrossDER: r.CrossDer, CrossFrom: r.CrossFrom, AddedAtMS: r.AddedAtMs, ActivatedAtMS: r.ActivatedAtMs, RetireAtMS: r.RetireAtMs})
	}
	if r := snap.CaRotation; r != nil {
		s.id.trust.rotation = &CARotation{RequestedAtMS: r.RequestedAtMs, OverlapMS: r.OverlapMs, By: r.By}
	}
}
