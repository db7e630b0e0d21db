package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// BrowserHandler serves, on a worker, a browser-session call relayed by
// another node (or made by this one).
type BrowserHandler func(ctx context.Context, r *peerpb.BrowserSessionRequest) *peerpb.Response

// browserCallTimeout bounds one relayed session call (a call of many
// steps may take a while; each step has its own limit).
const browserCallTimeout = 2 * time.Minute

// SetBrowserHandler installs this node's browser-session handler.
func (c *Cluster) SetBrowserHandler(f BrowserHandler) { c.browsers.Store(&f) }

func (c *Cluster) handleBrowserSession(ctx context.Context, _ identity.Principal, r *peerpb.BrowserSessionRequest) *peerpb.Response {
	f := c.browsers.Load()
	if f == nil {
		return errResp(codeFailedPrecond, "this node runs no browser sessions", "")
	}
	return (*f)(ctx, r)
}

// BrowserSession makes a browser-session call on node (in place when node
// is this one). The response carries the worker's error, if any.
func (c *Cluster) BrowserSession(ctx context.Context, node string, r *peerpb.BrowserSessionRequest) (*peerpb.Response, error) {
	if node == c.cfg.NodeID {
		return c.handleBrowserSession(ctx, identity.Principal{}, r), nil
	}
	var addr string
	for _, m := range c.Members() {
		if m.ID == node && m.State == StateAlive {
			addr = m.Address
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("worker %s is not alive: its browser sessions are gone (sessions live in one worker's memory and are not replicated)", node)
	}
	ctx, cancel := context.WithTimeout(ctx, browserCallTimeout)
	defer cancel()
	return c.call(ctx, addr, node, &peerpb.Request{Body: &peerpb.Request_BrowserSession{BrowserSession: r}})
}
