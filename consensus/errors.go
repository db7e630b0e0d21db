package consensus

import (
	"errors"
	"fmt"
)

// Error is a control-plane error with Palyra's {code, message, hint} shape.
// FSM rejections are returned as *Error from Apply so callers can map them
// onto API errors without string matching.
type Error struct {
	Code    string
	Message string
	Hint    string
}

func (e *Error) Error() string { return e.Message }

// Is matches errors with the same code, so errors.Is(err, ErrNotFound) works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code && t.Message == ""
}

// Sentinel codes; compare with errors.Is.
var (
	ErrNotFound         = &Error{Code: "not_found"}
	ErrConflict         = &Error{Code: "conflict"}
	ErrStaleAttempt     = &Error{Code: "stale_attempt"}
	ErrNotLeader        = &Error{Code: "not_leader"}
	ErrNoQuorum         = &Error{Code: "no_quorum"}
	ErrInvalid          = &Error{Code: "invalid_argument"}
	ErrPermissionDenied = &Error{Code: "permission_denied"}
	// ErrUnknownOutcome: the command was handed to raft but leadership was
	// lost before it was known to commit; it may still commit. Never retry
	// blindly: retry only commands that are safe to apply twice.
	ErrUnknownOutcome = &Error{Code: "unavailable"}
)

// WorthRetrying reports whether a command that failed with err may be
// sent again: there was no leader or quorum (it was not applied), or, when
// safe (a command fenced or numbered so that applying it twice is applying
// it once), its outcome is unknown.
func WorthRetrying(err error, safeTwice bool) bool {
	var ce *Error
	if !errors.As(err, &ce) {
		return false
	}
	return ce.Code == ErrNoQuorum.Code || ce.Code == ErrNotLeader.Code || safeTwice && ce.Code == ErrUnknownOutcome.Code
}

func errf(base *Error, hint, format string, args ...any) *Error {
	return &Error{Code: base.Code, Message: fmt.Sprintf(format, args...), Hint: hint}
}
