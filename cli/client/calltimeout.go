package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
)

// errCallTimeout is the cause of a context ended by callTimeout.
var errCallTimeout = errors.New("call timeout")

// callTimeout bounds unary calls that carry no deadline of their own
// (Options.CallTimeout). A call it ends fails with a deadline_exceeded
// *Error saying how long it waited and that the call may have taken
// effect; a call the caller bounded, or cancelled, is left as it was.
type callTimeout time.Duration

func (t callTimeout) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if _, ok := ctx.Deadline(); ok {
			return next(ctx, req)
		}
		d := time.Duration(t)
		deadline := time.Now().Add(d)
		cctx, cancel := context.WithDeadlineCause(ctx, deadline, errCallTimeout)
		defer cancel()
		resp, err := next(cctx, req)
		// The deadline travels with the call, so the node may give up and
		// answer a moment before this side's timer fires: past the
		// deadline, the failure is the call timeout's either way.
		if err != nil && ctx.Err() == nil && (errors.Is(context.Cause(cctx), errCallTimeout) || !time.Now().Before(deadline)) {
			return nil, &Error{Code: "deadline_exceeded",
				Message: fmt.Sprintf("no answer to %s within %s: the node took the call but did not reply; it may or may not have taken effect", req.Spec().Procedure, d),
				Hint:    "check the cluster with 'palyra status'; for a call that is slow on purpose, raise --call-timeout (PALYRA_CALL_TIMEOUT), or set it to 0 for no limit"}
		}
		return resp, err
	}
}

// Streaming calls follow something (a job, a log, a snapshot) for as long
// as it lasts: not bounded.
func (callTimeout) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (callTimeout) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
