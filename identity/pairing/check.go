package pairing

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/palyra-mesh/palyra/identity"
)

// Lifetimes a code may be given.
const (
	DefaultTTL = 10 * time.Minute
	MinTTL     = 30 * time.Second
	MaxTTL     = 24 * time.Hour
)

// Record is what the cluster stores for a live code (in Raft): never the
// secret, only its hash.
type Record struct {
	ID          string // Code.IDString()
	SecretHash  []byte // SecretHash(secret), 32 bytes
	Kind        string // "node" or "device"
	ExpiresAtMS int64  // Unix milliseconds
	CreatedBy   string // principal that made the code, e.g. "device:d-1a2b3c4d"
}

// Record returns the record to store for c, created at nowMS (Unix
// milliseconds, stamped by whoever proposes it, never read inside the FSM)
// and valid for ttl (DefaultTTL if zero; MinTTL to MaxTTL).
func (c Code) Record(createdBy string, nowMS int64, ttl time.Duration) (Record, error) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return Record{}, fmt.Errorf("%w: pairing code lifetime %s is out of range; use --ttl between %s and %s", ErrBadRecord, ttl, MinTTL, MaxTTL)
	}
	if !c.kind.Valid() {
		return Record{}, fmt.Errorf("%w: the zero Code is not a code; make one with New", ErrBadRecord)
	}
	return Record{
		ID:          c.IDString(),
		SecretHash:  c.SecretHash(),
		Kind:        string(c.kind),
		ExpiresAtMS: nowMS + ttl.Milliseconds(),
		CreatedBy:   createdBy,
	}, nil
}

// Check decides whether presentedSecret redeems rec at nowMS. It is a pure
// function of its arguments (no clock, no randomness), so the Raft FSM can
// run it with the time the leader stamped on the log entry. The secret is
// checked first, in constant time, so only the holder of the code learns
// whether it has expired. A nil error means: consume the record now. Used
// and unknown codes are the caller's to report (ErrUsed, ErrUnknownCode).
func Check(rec Record, presentedSecret []byte, nowMS int64) error {
	if len(rec.SecretHash) != sha256.Size {
		return fmt.Errorf("%w: record %q holds a %d-byte secret hash, want %d; create a new code with 'palyra pair create'",
			ErrBadRecord, rec.ID, len(rec.SecretHash), sha256.Size)
	}
	if !identity.Kind(rec.Kind).Valid() {
		return fmt.Errorf("%w: record %q has unknown kind %q", ErrBadRecord, rec.ID, rec.Kind)
	}
	if subtle.ConstantTimeCompare(SecretHash(presentedSecret), rec.SecretHash) != 1 {
		return fmt.Errorf("%w for code %s: check the code, or create a new one with 'palyra pair create'", ErrWrongSecret, rec.ID)
	}
	if nowMS >= rec.ExpiresAtMS {
		return fmt.Errorf("%w %s ago; create a new one with 'palyra pair create'", ErrExpired, ago(nowMS-rec.ExpiresAtMS))
	}
	return nil
}

// ago renders an age in milliseconds the way a person says it: 45s, 3m,
// 2h5m, 3d (rounded down).
func ago(ms int64) string {
	const (
		second = int64(1000)
		minute = 60 * second
		hour   = 60 * minute
		day    = 24 * hour
	)
	switch {
	case ms < 0: // only when nowMS - ExpiresAtMS overflowed
		return "long"
	case ms < minute:
		return fmt.Sprintf("%ds", ms/second)
	case ms < hour:
		return fmt.Sprintf("%dm", ms/minute)
	case ms < 2*day:
		if m := ms % hour / minute; m != 0 {
			return fmt.Sprintf("%dh%dm", ms/hour, m)
		}
		return fmt.Sprintf("%dh", ms/hour)
	default:
		return fmt.Sprintf("%dd", ms/day)
	}
}
