package consensus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// MaxJournal is how many audit records the state keeps; older ones are
// folded into the base (the chain's hash at the last folded record), so a
// verifier still checks every retained record against the whole history's
// hash.
const MaxJournal = 100_000

// journal is the audit journal: appended by Apply, identical on every
// replica (records are made only from the command and the state).
type journal struct {
	records  []*raftpb.AuditRecord
	baseSeq  uint64
	baseHash string
}

func (j *journal) head() (uint64, string) {
	if n := len(j.records); n > 0 {
		return j.records[n-1].Seq, j.records[n-1].Sha256
	}
	return j.baseSeq, j.baseHash
}

// audit appends a record. It is called inside Apply only.
func (s *State) audit(at int64, actor, action, subject, detail string) {
	j := &s.journal
	seq, prev := j.head()
	seq++
	r := &raftpb.AuditRecord{Seq: seq, AtMs: at, Actor: actor, Action: action, Subject: subject, Detail: detail, PrevSha256: prev}
	r.Sha256 = palyrav1.AuditHash(prev, seq, at, actor, action, subject, detail)
	j.records = append(j.records, r)
	if len(j.records) > MaxJournal {
		drop := len(j.records) - MaxJournal
		last := j.records[drop-1]
		j.baseSeq, j.baseHash = last.Seq, last.Sha256
		j.records = append(j.records[:0:0], j.records[drop:]...)
	}
}

// auditCommand records cmd in the journal if it is a security-relevant
// change that applied.
func (s *State) auditCommand(cmd *raftpb.Command, res ApplyResult) {
	if res.Err != nil {
		return
	}
	switch c := cmd.Cmd.(type) {
	case *raftpb.Command_CreatePairing:
		if p := c.CreatePairing.GetPairing(); p != nil {
			detail := "kind=" + p.Kind
			if p.Operator {
				detail += " operator"
			}
			s.audit(p.CreatedAtMs, p.CreatedBy, "pairing.create", "pairing:"+p.Id, detail)
		}
	case *raftpb.Command_ConsumePairing:
		if c.ConsumePairing.DryRun || c.ConsumePairing.Member == nil {
			return
		}
		// What applied, not what was asked: the member's operator flag
		// comes from the code (applyConsumePairing), never the request.
		cp := c.ConsumePairing
		key := cp.Member.Kind + ":" + cp.Member.Id
		m := s.id.members[key]
		if m == nil {
			return
		}
		s.audit(cp.AtMs, key, "pairing.consume", "pairing:"+cp.Id, fmt.Sprintf("paired %s %s operator=%v", m.Kind, m.ID, m.Operator))
		// A joining node's local operator device is added by the same
		// command: it gets a record of its own, as any added member does.
		if op := cp.LocalOperator; op != nil {
			if om := s.id.members["device:"+op.Id]; om != nil {
				s.audit(cp.AtMs, key, "member.add", "device:"+om.ID, fmt.Sprintf("operator=%v local operator of %s (pairing:%s)", om.Operator, key, cp.Id))
			}
		}
	case *raftpb.Command_RevokePairing:
		s.audit(c.RevokePairing.AtMs, c.RevokePairing.By, "pairing.revoke", "pairing:"+c.RevokePairing.Id, "")
	case *raftpb.Command_AddMember:
		if m := c.AddMember.GetMember(); m != nil {
			s.audit(m.AddedAtMs, m.AddedBy, "member.add", m.Kind+":"+m.Id, fmt.Sprintf("operator=%v", m.Operator))
		}
	case *raftpb.Command_RevokeMember:
		s.audit(c.RevokeMember.AtMs, c.RevokeMember.By, "member.revoke", c.RevokeMember.Kind+":"+c.RevokeMember.Id, "")
	case *raftpb.Command_RevokeCert:
		s.audit(c.RevokeCert.AtMs, "", "cert.revoke", "serial:"+c.RevokeCert.Serial, c.RevokeCert.Reason)
	case *raftpb.Command_RecordCerts:
		for _, r := range c.RecordCerts.Certs {
			s.audit(c.RecordCerts.AtMs, c.RecordCerts.By, "cert.issue", r.Kind+":"+r.Id, "serial:"+r.Serial)
		}
	case *raftpb.Command_StartCertLedger:
		s.audit(c.StartCertLedger.AtMs, "", "cert.ledger", "ledger", fmt.Sprintf("complete=%v %s", c.StartCertLedger.Complete, c.StartCertLedger.Reason))
	case *raftpb.Command_SetPolicy:
		s.audit(c.SetPolicy.AtMs, c.SetPolicy.By, "policy.set", "policy", fmt.Sprintf("version=%d sha256=%s", s.id.policy.Version, sha256hex(c.SetPolicy.Source)))
	case *raftpb.Command_SetSecret:
		s.audit(c.SetSecret.AtMs, c.SetSecret.By, "secret.set", "secret:"+c.SetSecret.Name, "") // the name only
	case *raftpb.Command_DeleteSecret:
		s.audit(c.DeleteSecret.AtMs, c.DeleteSecret.By, "secret.delete", "secret:"+c.DeleteSecret.Name, "")
	case *raftpb.Command_KvPut: // an operator's; jobs' writes are theirs to log
		if k := c.KvPut; k.By != "" {
			s.audit(k.AtMs, k.By, "kv.put", "kv:"+k.Key, fmt.Sprintf("%d bytes", len(k.Value)))
		}
	case *raftpb.Command_KvDelete:
		if k := c.KvDelete; k.By != "" {
			s.audit(k.AtMs, k.By, "kv.delete", "kv:"+k.Key, "")
		}
	case *raftpb.Command_SetRetention:
		s.audit(c.SetRetention.AtMs, c.SetRetention.By, "retention.set", "cluster", fmt.Sprintf("retention_ms=%d", c.SetRetention.RetentionMs))
	case *raftpb.Command_DecideJob:
		action := "job.deny"
		if c.DecideJob.Approve {
			action = "job.approve"
		}
		s.audit(c.DecideJob.AtMs, c.DecideJob.By, action, "job:"+c.DecideJob.Id, c.DecideJob.Reason)
	case *raftpb.Command_Skill:
		k := c.Skill
		switch {
		case k.Trust != nil:
			s.audit(k.AtMs, k.By, "skill.trust", "publisher:"+k.Trust.Name, "key="+k.Trust.Key)
		case k.Untrust != "":
			s.audit(k.AtMs, k.By, "skill.untrust", "publisher:"+k.Untrust, "")
		case k.Install != nil:
			r := k.Install
			now := s.data.skills[r.SkillId]
			detail := fmt.Sprintf("publisher=%s version=%s package=%s status=%s", r.Publisher, r.Version, r.PackageSha256, SkillStatusName(now.GetStatus()))
			if prev := now.GetPreviousVersion(); prev != "" {
				detail += " replaces=" + prev
			}
			if len(r.Findings) > 0 {
				detail += " findings=" + strings.Join(r.Findings, "; ")
			}
			s.audit(k.AtMs, k.By, "skill.install", "skill:"+r.SkillId, detail)
		case k.SetStatusId != "":
			s.audit(k.AtMs, k.By, "skill."+SkillStatusName(k.Status), "skill:"+k.SetStatusId, k.Reason)
		case k.RemoveId != "":
			s.audit(k.AtMs, k.By, "skill.remove", "skill:"+k.RemoveId, "")
		}
	case *raftpb.Command_Hook:
		if b := c.Hook.Bind; b != nil {
			s.audit(c.Hook.AtMs, c.Hook.By, "hook.bind", "hook:"+b.Id, b.Event+" -> "+b.SkillId+"/"+b.Tool)
		} else {
			s.audit(c.Hook.AtMs, c.Hook.By, "hook.unbind", "hook:"+c.Hook.Unbind, "")
		}
	case *raftpb.Command_CaTrust:
		t := c.CaTrust
		switch op := t.Op.(type) {
		case *raftpb.CATrust_Init:
			s.audit(t.AtMs, t.By, "ca.init", "ca", "")
		case *raftpb.CATrust_Request:
			s.audit(t.AtMs, t.By, "ca.rotate.request", "ca", fmt.Sprintf("overlap_ms=%d", op.Request.OverlapMs))
		case *raftpb.CATrust_Activate:
			s.audit(t.AtMs, t.By, "ca.rotate.activate", "root:"+op.Activate.Fingerprint, "")
		case *raftpb.CATrust_Drop:
			s.audit(t.AtMs, t.By, "ca.rotate.drop", "root:"+op.Drop.Fingerprint, "")
		}
	}
}

func sha256hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Journal returns up to limit records after seq afterSeq (and at or after
// sinceMS), the chain's base and head, and whether more follow.
func (s *State) Journal(afterSeq uint64, sinceMS int64, limit int) (recs []*raftpb.AuditRecord, baseSeq uint64, baseHash string, more bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	j := &s.journal
	start := 0
	if afterSeq > j.baseSeq {
		start = int(min(afterSeq-j.baseSeq, uint64(len(j.records))))
	}
	for _, r := range j.records[start:] {
		if r.AtMs < sinceMS {
			continue
		}
		if len(recs) == limit {
			more = true
			break
		}
		recs = append(recs, r) // records never change once appended
	}
	return recs, j.baseSeq, j.baseHash, more
}

// JournalHead is the chain's last seq and hash.
func (s *State) JournalHead() (uint64, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.journal.head()
}

// VerifyJournal recomputes the retained chain from the base.
func (s *State) VerifyJournal() (records int, badSeq uint64, problem string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.journal.verify()
}

// verify recomputes the chain of j's records from its base.
func (j *journal) verify() (records int, badSeq uint64, problem string) {
	pbs := make([]*palyrav1.AuditRecord, len(j.records))
	for i, r := range j.records {
		pbs[i] = AuditRecordPB(r)
	}
	bad, why := palyrav1.VerifyAuditChain(j.baseSeq, j.baseHash, pbs)
	return len(pbs), bad, why
}

// AuditRecordPB converts a journal record to its API form.
func AuditRecordPB(r *raftpb.AuditRecord) *palyrav1.AuditRecord {
	return &palyrav1.AuditRecord{Seq: r.Seq, AtMs: r.AtMs, Actor: r.Actor, Action: r.Action, Subject: r.Subject,
		Detail: r.Detail, PrevSha256: r.PrevSha256, Sha256: r.Sha256}
}

func (s *State) snapshotJournal(snap *raftpb.Snapshot) {
	snap.Journal = s.journal.records
	snap.JournalBaseSeq, snap.JournalBaseSha256 = s.journal.baseSeq, s.journal.baseHash
}

func (s *State) restoreJournal(snap *raftpb.Snapshot) {
	s.journal = journal{records: snap.Journal, baseSeq: snap.JournalBaseSeq, baseHash: snap.JournalBaseSha256}
}
