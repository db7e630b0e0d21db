package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// During a rolling upgrade some nodes run older software that lacks a call
// this client makes: they answer it "unimplemented" (the procedure is not
// routed) without running it. Such a unary call is made again through the
// client's other nodes, one at a time, each on a connection of its own
// (pinned to that address: the shared connection, which other calls and
// Followers use, stays where it is), until one has it. Any other outcome
// there, success or failure, is the call's: only "this call does not
// exist here" is known not to have taken effect. Streams are not retried.

// pinKey is the context key of the address a retried call must go to.
type pinKey struct{}

// lacksCall reports whether err says the node that answered does not have
// the call at all: unimplemented, without the node's own error (a node that
// has the call but cannot serve it here, such as one that keeps no metrics,
// says why in a palyrav1.Error, and another node is not asked instead).
func lacksCall(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnimplemented {
		return false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if _, ok := v.(*palyrav1.Error); ok {
				return false
			}
		}
	}
	return true
}

// olderError is a call every node that answered lacks: Addrs are those
// nodes, Err the first one's answer (a *connect.Error, unimplemented).
type olderError struct {
	Addrs []string
	Err   error
}

func (e *olderError) Error() string {
	return fmt.Sprintf("none of %s has this call: %v", strings.Join(e.Addrs, ", "), e.Err)
}

func (e *olderError) Unwrap() error { return e.Err }

// pinDialError is a pinned call's dial that no node completed: nothing
// was sent there.
type pinDialError struct {
	Addr string
	Err  error
}

func (e *pinDialError) Error() string { return fmt.Sprintf("dial %s: %v", e.Addr, e.Err) }
func (e *pinDialError) Unwrap() error { return e.Err }

// olderNodes is the interceptor that retries a unary call a node lacks on
// the client's other nodes (see above).
type olderNodes struct{ c *Client }

func (o olderNodes) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if !lacksCall(err) {
			return resp, err
		}
		refused := []string{o.c.Reached()}
		for _, addr := range o.c.order() {
			if slices.Contains(refused, addr) {
				continue
			}
			if ctx.Err() != nil {
				break
			}
			r, e := next(context.WithValue(ctx, pinKey{}, addr), req)
			var pe *pinDialError
			switch {
			case errors.As(e, &pe): // nothing answered there
				continue
			case lacksCall(e):
				refused = append(refused, addr)
				continue
			}
			return r, e
		}
		if len(refused) == 1 {
			return nil, err
		}
		return nil, &olderError{Addrs: refused, Err: err}
	}
}

func (olderNodes) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (olderNodes) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// routedHTTP is the HTTP client the API clients use: a request pinned to
// an address (pinKey) goes there on a connection of its own, any other
// through the client's shared connection.
type routedHTTP struct {
	shared, pinned *http.Client
}

func (h routedHTTP) Do(req *http.Request) (*http.Response, error) {
	addr, _ := req.Context().Value(pinKey{}).(string)
	if addr == "" {
		return h.shared.Do(req)
	}
	// The pinned transport keeps one connection per URL host and dials
	// that host (dialPinned).
	r := req.Clone(req.Context())
	r.URL.Host, r.Host = addr, ""
	return h.pinned.Do(r)
}

// dialPinned connects to exactly addr, on the client's UDP socket, for a
// pinned call. A failure is a *pinDialError: nothing was sent.
func (c *Client) dialPinned(ctx context.Context, addr string, tlsCfg *tls.Config, qcfg *quic.Config) (*quic.Conn, error) {
	qt, err := c.transport()
	if err != nil {
		return nil, &pinDialError{Addr: addr, Err: err}
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, &pinDialError{Addr: addr, Err: err}
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	conn, err := qt.Dial(dctx, ua, tlsCfg, qcfg)
	if err != nil {
		return nil, &pinDialError{Addr: addr, Err: err}
	}
	return conn, nil
}
