package mesh

import (
	"context"
	"fmt"

	"github.com/quic-go/quic-go"
)

// DialAPI opens a new ALPNAPI connection to the node at addr, authenticated
// with ClientTLS, for forwarding API calls to another node. The caller owns
// the connection (it is not cached) but Close and SetFault still reach it.
// It fits http3.Transport.Dial:
//
//	Dial: func(ctx context.Context, addr string, _ *tls.Config, _ *quic.Config) (*quic.Conn, error) {
//		return t.DialAPI(ctx, addr)
//	}
func (t *Transport) DialAPI(ctx context.Context, addr string) (*quic.Conn, error) {
	ua, err := resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	if t.faulted(ua) {
		return nil, fmt.Errorf("mesh: dial API %s: %w", canonical(ua), ErrPartitioned)
	}
	if t.ctx.Err() != nil {
		return nil, ErrClosed
	}
	// Stop the dial if the transport closes while the handshake runs.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()
	c, err := t.qt.Dial(ctx, ua, t.apiTLS, t.qconf)
	if err != nil {
		return nil, fmt.Errorf("mesh: dial API %s: %w", canonical(ua), err)
	}
	if t.faulted(c.RemoteAddr()) { // cut off while dialling
		t.faultClose(c)
		return nil, fmt.Errorf("mesh: dial API %s: %w", canonical(ua), ErrPartitioned)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.CloseWithError(codeClosed, "shutting down")
		return nil, ErrClosed
	}
	t.trackLocked(c, "")
	return c, nil
}
