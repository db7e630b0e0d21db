package pairing

import "errors"

// Sentinel errors, for errors.Is. Returned errors wrap one of these and add
// what went wrong and what to do in words.
var (
	// ErrBadLength: a code has too few or too many characters.
	ErrBadLength = errors.New("pairing code has the wrong length")
	// ErrBadCharacter: a code holds a character outside its alphabet.
	ErrBadCharacter = errors.New("pairing code has a character that cannot be in it")
	// ErrBadChecksum: a code's check characters do not match (a typo).
	ErrBadChecksum = errors.New("pairing code checksum does not match: mistyped? check the code")
	// ErrUnknownVersion: a code's version prefix is not one this build reads.
	ErrUnknownVersion = errors.New("unknown pairing code version")
	// ErrBadFingerprint: New was given something that is not a SHA-256 hex
	// fingerprint.
	ErrBadFingerprint = errors.New("bad CA fingerprint")

	// ErrPinMismatch: the server's CA is not the one the code pins.
	ErrPinMismatch = errors.New("server's CA fingerprint does not match the pairing code: this is not the cluster that made the code")

	// ErrExpired: the code's TTL has passed.
	ErrExpired = errors.New("pairing code expired")
	// ErrWrongSecret: the presented secret is not the code's secret.
	ErrWrongSecret = errors.New("pairing code secret does not match")
	// ErrUsed: the code was already consumed. Check never returns it: the
	// caller, which knows whether the record was consumed, does.
	ErrUsed = errors.New("pairing code was already used; create a new one with 'palyra pair create'")
	// ErrUnknownCode: no live record has the code's ID (never created, or
	// consumed and removed). Returned by the caller, like ErrUsed.
	ErrUnknownCode = errors.New("pairing code is not known to this cluster; check --peer, or create a new one with 'palyra pair create'")
	// ErrBadRecord: a stored record is malformed (e.g. a hash of the wrong
	// length) or asked for an invalid TTL or kind.
	ErrBadRecord = errors.New("bad pairing record")
)
