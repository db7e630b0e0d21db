package api

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// apiError builds a Connect error carrying Palyra's {code, message, hint}
// as a typed detail, so every client can print the hint.
func apiError(cc connect.Code, code, message, hint string) *connect.Error {
	err := connect.NewError(cc, errors.New(message))
	if d, derr := connect.NewErrorDetail(&palyrav1.Error{Code: code, Message: message, Hint: hint}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

var codeMap = map[string]connect.Code{
	consensus.ErrNotFound.Code:     connect.CodeNotFound,
	consensus.ErrConflict.Code:     connect.CodeFailedPrecondition,
	consensus.ErrStaleAttempt.Code: connect.CodeFailedPrecondition,
	consensus.ErrInvalid.Code:      connect.CodeInvalidArgument,
	consensus.ErrNoQuorum.Code:     connect.CodeUnavailable,
	consensus.ErrNotLeader.Code:    connect.CodeUnavailable,
	// Unknown outcome (leadership lost mid-commit, a forwarded write with
	// no reply): retryable with the same idempotency key.
	consensus.ErrUnknownOutcome.Code: connect.CodeUnavailable,
}

// fromErr maps internal errors onto API errors.
func fromErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *consensus.Error
	if errors.As(err, &ce) {
		cc, ok := codeMap[ce.Code]
		if !ok {
			cc = connect.CodeInternal
		}
		return apiError(cc, ce.Code, ce.Message, ce.Hint)
	}
	var ae *connect.Error
	if errors.As(err, &ae) {
		return ae
	}
	if errors.Is(err, errCanceled) {
		return apiError(connect.CodeCanceled, "canceled", err.Error(), "")
	}
	return apiError(connect.CodeInternal, "internal", err.Error(), "check the node's log")
}

var errCanceled = errors.New("request canceled")
