package client

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"
)

// A node that stops (SIGTERM, 'node leave') closes its connections, and a
// call in flight there fails with the close ("H3_NO_ERROR: node shutting
// down"). A call that only reads is made once more through another node:
// it changed nothing where it failed. A call that writes keeps its error
// (it may have taken effect); streams have their own following
// (Follower).

// closedByNode reports whether err is the node closing the connection
// under the call (an application close from its side).
func closedByNode(err error) bool {
	var ae *quic.ApplicationError
	return errors.As(err, &ae) && ae.Remote
}

// readOnly reports whether a procedure ("/palyra.v1.JobService/GetJob")
// only reads.
func readOnly(procedure string) bool {
	name := procedure[strings.LastIndexByte(procedure, '/')+1:]
	for _, p := range []string{"Get", "List", "Count", "Verify", "Check"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return name == "Status" || name == "Metrics"
}

// goingAway is the interceptor that retries a read once elsewhere when
// its node closed the connection under it.
type goingAway struct{ c *Client }

func (g goingAway) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err == nil || !closedByNode(err) || !readOnly(req.Spec().Procedure) || ctx.Value(pinKey{}) != nil || ctx.Err() != nil {
			return resp, err
		}
		others := len(g.c.order()) > 1
		g.c.mu.Lock()
		if g.c.answered != "" && others {
			g.c.avoid = g.c.answered // the next dial tries it last
		}
		g.c.conn = nil
		g.c.mu.Unlock()
		return next(ctx, req)
	}
}

func (goingAway) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (goingAway) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
