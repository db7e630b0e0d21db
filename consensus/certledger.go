package consensus

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// The certificate ledger: every leaf the cluster's CA signs is recorded
// (serial, principal, key) before the signer hands it out, and a peer is
// accepted only with a certificate the ledger holds. The CA key signs for
// whoever holds it; a removed voter's disk, a stolen backup, keep it. The
// ledger makes a certificate the key signs outside the cluster's own CA
// service worthless: it names no serial the cluster recorded, or names one
// for another principal or key. identity/DESIGN.md says more.

// MaxCertLifetimeMS bounds the lifetime of any certificate the cluster
// issues (node start's --cert-ttl); a ledger started over certificates it
// does not hold accepts them for at most this long.
const MaxCertLifetimeMS = int64(90 * 24 * time.Hour / time.Millisecond)

// pruneGrace is how long after it expires a leaf stays in the ledger: the
// cluster clock only moves forward, and a leader whose clock ran ahead
// must not drop certificates still valid on the others' clocks. One
// lifetime of the leaf, from an hour to a week: with a lifetime of
// seconds (--cert-ttl 5s) a week of renewals would be ~180,000 entries per
// member; this keeps about a thousand at most.
func pruneGrace(e *issuedCert) int64 {
	const hour, week = int64(time.Hour / time.Millisecond), int64(7 * 24 * time.Hour / time.Millisecond)
	return min(max(e.notAfterMS-e.notBeforeMS, hour), week)
}

// issuedCert is one ledger entry.
type issuedCert struct {
	kind, id    string
	sum         []byte // SHA-256 of the leaf's DER
	spki        []byte // SHA-256 of its key
	notBeforeMS int64
	notAfterMS  int64
}

// certLedger is the part of State holding the ledger.
type certLedger struct {
	sinceMS  int64 // 0: not started; every leaf is accepted
	complete bool
	certs    map[string]*issuedCert // by serial
	// renewed: principals ("kind:id") with a leaf recorded since the
	// ledger was (re)started, and when the first was.
	renewed map[string]int64
}

func newCertLedger() certLedger {
	return certLedger{certs: map[string]*issuedCert{}, renewed: map[string]int64{}}
}

// RenewedGraceMS is how long a member's grandfathered leaf is still
// accepted after a leaf of its was recorded: a renewal whose answer was
// lost is tried again with the old one.
const RenewedGraceMS = int64(10 * time.Minute / time.Millisecond)

// CertVerdict is what the ledger says of a presented leaf.
type CertVerdict int

// Verdicts.
const (
	// CertRecorded: the ledger holds this very leaf for this principal.
	CertRecorded CertVerdict = iota
	// CertUnchecked: the ledger is not started, or the leaf predates a
	// restart of it and names a member in good standing (grandfathered);
	// accepted.
	CertUnchecked
	// CertUnknown: the ledger does not hold this serial. A replica behind
	// the leader may not have applied it yet; a current one refuses it.
	CertUnknown
	// CertMismatch: the serial is recorded for another principal or
	// another leaf: a forgery, refused.
	CertMismatch
)

// CertSum is the digest the ledger records for a leaf.
func CertSum(c *x509.Certificate) []byte {
	sum := sha256.Sum256(c.Raw)
	return sum[:]
}

// IssuedCertPB is the ledger entry of leaf c issued to kind:id.
func IssuedCertPB(c *x509.Certificate, kind, id string) *raftpb.IssuedCert {
	return &raftpb.IssuedCert{Serial: c.SerialNumber.String(), Kind: kind, Id: id,
		CertSha256: CertSum(c), SpkiSha256: keySum(c), NotBeforeMs: c.NotBefore.UnixMilli(), NotAfterMs: c.NotAfter.UnixMilli()}
}

func keySum(c *x509.Certificate) []byte {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return sum[:]
}

// CertLedgerStarted reports whether the ledger is enforced, and since when.
func (s *State) CertLedgerStarted() (sinceMS int64, complete, started bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.id.ledger.sinceMS, s.id.ledger.complete, s.id.ledger.sinceMS != 0
}

// IssuedCerts is the number of leaves the ledger holds (expired ones stay
// for another lifetime, an hour to a week).
func (s *State) IssuedCerts() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.id.ledger.certs)
}

// CertStatus judges leaf c, presented for principal kind:id, by the ledger
// (now: this node's clock, for the grace after a renewal).
func (s *State) CertStatus(c *x509.Certificate, kind, id string) (CertVerdict, string) {
	return s.certStatusAt(c, kind, id, time.Now().UnixMilli())
}

func (s *State) certStatusAt(c *x509.Certificate, kind, id string, nowMS int64) (CertVerdict, string) {
	serial := c.SerialNumber.String()
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := &s.id.ledger
	if e, ok := l.certs[serial]; ok {
		if e.kind != kind || e.id != id {
			return CertMismatch, fmt.Sprintf("certificate %s was issued to %s:%s, not %s:%s", serial, e.kind, e.id, kind, id)
		}
		if !bytes.Equal(e.sum, CertSum(c)) {
			return CertMismatch, fmt.Sprintf("certificate %s for %s:%s is not the one the cluster issued under that serial", serial, kind, id)
		}
		return CertRecorded, ""
	}
	if l.sinceMS == 0 {
		return CertUnchecked, ""
	}
	// A node renews on its key: a replica that has not applied the new
	// certificate's record knows it by a recorded one of the same member
	// with the same key (a copy of the CA key cannot make that: it needs
	// the member's private key).
	if kind == "node" {
		ks := keySum(c)
		for _, e := range l.certs {
			if e.kind == kind && e.id == id && len(e.spki) > 0 && bytes.Equal(e.spki, ks) {
				return CertRecorded, ""
			}
		}
	}
	if !l.complete && c.NotBefore.UnixMilli() < l.sinceMS && c.NotAfter.UnixMilli() <= l.sinceMS+MaxCertLifetimeMS {
		m, member := s.id.members[kind+":"+id]
		renewedAt, renewed := l.renewed[kind+":"+id]
		// Only members registered before the restart: one registered since
		// (the restored node and its operator) has every leaf recorded.
		if member && !m.Revoked && m.AddedAtMS < l.sinceMS && (!renewed || nowMS < renewedAt+RenewedGraceMS) {
			return CertUnchecked, ""
		}
	}
	return CertUnknown, fmt.Sprintf("certificate %s for %s:%s was not issued by this cluster's CA service", serial, kind, id)
}

func (s *State) applyRecordCerts(c *raftpb.RecordCerts) ApplyResult {
	l := &s.id.ledger
	for _, r := range c.Certs {
		if r.GetSerial() == "" || !validKind(r.Kind) || r.Id == "" || len(r.CertSha256) != sha256.Size {
			return ApplyResult{Err: errf(ErrInvalid, "", "malformed certificate record")}
		}
		if old, ok := l.certs[r.Serial]; ok && (old.kind != r.Kind || old.id != r.Id || !bytes.Equal(old.sum, r.CertSha256)) {
			return ApplyResult{Err: errf(ErrConflict, "", "certificate serial %s is already recorded for %s:%s", r.Serial, old.kind, old.id)}
		}
	}
	for serial, e := range l.certs { // order-independent pruning
		if e.notAfterMS+pruneGrace(e) < c.AtMs {
			delete(l.certs, serial)
		}
	}
	for _, r := range c.Certs {
		l.certs[r.Serial] = &issuedCert{kind: r.Kind, id: r.Id, sum: append([]byte(nil), r.CertSha256...),
			spki: append([]byte(nil), r.SpkiSha256...), notBeforeMS: r.NotBeforeMs, notAfterMS: r.NotAfterMs}
		// Recorded after the (re)start, whatever its NotBefore says (the
		// signer's clock): the log's order is what counts.
		if p := r.Kind + ":" + r.Id; l.sinceMS != 0 && !l.complete && l.renewed[p] == 0 {
			l.renewed[p] = c.AtMs
		}
	}
	return ApplyResult{}
}

func (s *State) applyStartCertLedger(c *raftpb.StartCertLedger) ApplyResult {
	if c.AtMs <= 0 {
		return ApplyResult{Err: errf(ErrInvalid, "", "certificate ledger start without a time")}
	}
	l := &s.id.ledger
	if l.sinceMS != 0 && c.Complete {
		// Only a new cluster starts complete, and only once.
		return ApplyResult{Err: errf(ErrConflict, "", "the certificate ledger was started already")}
	}
	l.sinceMS, l.complete = c.AtMs, c.Complete
	l.renewed = map[string]int64{}
	return ApplyResult{}
}

func (s *State) snapshotCertLedger(snap *raftpb.Snapshot) {
	l := &s.id.ledger
	if l.sinceMS == 0 && len(l.certs) == 0 {
		return
	}
	r := &raftpb.CertLedgerRecord{SinceMs: l.sinceMS, Complete: l.complete}
	for _, p := range sortedKeys(l.renewed) {
		r.Renewed = append(r.Renewed, &raftpb.RenewedMember{Principal: p, AtMs: l.renewed[p]})
	}
	for _, serial := range sortedKeys(l.certs) {
		e := l.certs[serial]
		r.Certs = append(r.Certs, &raftpb.IssuedCert{Serial: serial, Kind: e.kind, Id: e.id, CertSha256: e.sum, SpkiSha256: e.spki,
			NotBeforeMs: e.notBeforeMS, NotAfterMs: e.notAfterMS})
	}
	snap.CertLedger = r
}

func (s *State) restoreCertLedger(snap *raftpb.Snapshot) {
	l := &s.id.ledger
	*l = newCertLedger()
	r := snap.GetCertLedger()
	if r == nil {
		return
	}
	l.sinceMS, l.complete = r.SinceMs, r.Complete
	for _, e := range r.Certs {
		l.certs[e.Serial] = &issuedCert{kind: e.Kind, id: e.Id, sum: e.CertSha256, spki: e.SpkiSha256, notBeforeMS: e.NotBeforeMs, notAfterMS: e.NotAfterMs}
	}
	for _, p := range r.Renewed {
		l.renewed[p.Principal] = p.AtMs
	}
}
