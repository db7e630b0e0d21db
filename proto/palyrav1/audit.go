package palyrav1

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// auditDomain separates audit hashes from every other sha256 in Palyra.
const auditDomain = "palyra-audit-v1"

// AuditHash is the hash of an audit record: sha256 over the domain, the
// previous record's hash and the record's own fields, each
// length-prefixed. Every replica computes the same chain; a verifier
// recomputes it from the records alone.
func AuditHash(prev string, seq uint64, atMS int64, actor, action, subject, detail string) string {
	h := sha256.New()
	var n [8]byte
	field := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(auditDomain)
	field(prev)
	binary.BigEndian.PutUint64(n[:], seq)
	h.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(atMS))
	h.Write(n[:])
	field(actor)
	field(action)
	field(subject)
	field(detail)
	return hex.EncodeToString(h.Sum(nil))
}

// VerifyAuditChain checks records (in order) against the chain that
// starts at baseSeq with baseHash ("" for the journal's first record). It
// returns the seq of the first record that does not verify and why, or 0
// and "" when every record does.
func VerifyAuditChain(baseSeq uint64, baseHash string, records []*AuditRecord) (uint64, string) {
	prev, seq := baseHash, baseSeq
	for _, r := range records {
		switch {
		case r.Seq != seq+1:
			return r.Seq, fmt.Sprintf("record %d follows record %d (a record is missing or out of order)", r.Seq, seq)
		case r.PrevSha256 != prev:
			return r.Seq, fmt.Sprintf("record %d names previous hash %s, the chain has %s", r.Seq, short(r.PrevSha256), short(prev))
		}
		if want := AuditHash(prev, r.Seq, r.AtMs, r.Actor, r.Action, r.Subject, r.Detail); r.Sha256 != want {
			return r.Seq, fmt.Sprintf("record %d's fields hash to %s, it says %s (the record was altered)", r.Seq, short(want), short(r.Sha256))
		}
		prev, seq = r.Sha256, r.Seq
	}
	return 0, ""
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16] + "…"
	}
	if h == "" {
		return `""`
	}
	return h
}
