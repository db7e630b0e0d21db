package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// defaultCallTimeout bounds a peer RPC whose context has no deadline.
const defaultCallTimeout = 10 * time.Second

// callError says how far a failed call got: if the request was never
// sent, retrying cannot apply a command twice.
type callError struct {
	addr string
	sent bool
	err  error
}

func (e *callError) Error() string {
	if e.sent {
		return fmt.Sprintf("peer %s: no reply: %v", e.addr, e.err)
	}
	return fmt.Sprintf("peer %s unreachable: %v", e.addr, e.err)
}
func (e *callError) Unwrap() error { return e.err }

// notSent reports whether err is a call that failed before the request
// left this node.
func notSent(err error) bool {
	var ce *callError
	return errors.As(err, &ce) && !ce.sent
}

// call sends req to the node at addr and returns its response. If wantID is
// set, the peer's certificate must name that node, so a stale or spoofed
// address cannot answer for another node.
func (c *Cluster) call(ctx context.Context, addr, wantID string, req *peerpb.Request) (*peerpb.Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultCallTimeout)
		defer cancel()
	}
	conn, err := c.cfg.Transport.OpenStream(ctx, addr, mesh.TagRPC)
	if err != nil {
		return nil, &callError{addr: addr, err: err}
	}
	defer conn.Close()
	p, err := connPrincipal(conn)
	if err != nil {
		return nil, &callError{addr: addr, err: err}
	}
	if wantID != "" && p.ID != wantID {
		return nil, &callError{addr: addr, err: fmt.Errorf("peer at %s is %s, not node %s", addr, p, wantID)}
	}
	d, _ := ctx.Deadline()
	conn.SetDeadline(d)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if err := writeFrame(conn, req); err != nil {
		// A failed Write did not take the whole frame, so the peer cannot
		// have read a complete request: nothing was executed.
		return nil, &callError{addr: addr, err: err}
	}
	var resp peerpb.Response
	if err := readFrame(conn, &resp); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, &callError{addr: addr, sent: true, err: err}
	}
	return &resp, nil
}
