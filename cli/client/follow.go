package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"
)

// keepAlive is how often a connection pings its node when nothing else
// goes: a live node acknowledges each, so a Follower hears from it at
// least this often.
const keepAlive = 500 * time.Millisecond

// silenceTick is how often the silence watch looks at the connection.
const silenceTick = 100 * time.Millisecond

// silentCode is the QUIC application error code of a connection this
// client closed because its node went silent.
const silentCode quic.ApplicationErrorCode = 0x70616c73

// reconnectPauses are the pauses between the starts of the attempts to
// open a broken stream again: none before the first (it goes to another
// node, the one whose stream broke last), then short ones, capped at a
// second so a node that merely restarts is back in use within a second of
// serving again. An attempt that took longer (a dial nobody answered) is
// followed by the next at once.
var reconnectPauses = []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}

// Notice tells a Follower's user that it lost its node's stream (Through
// empty: it reconnects) or that it follows again (Through: the node that
// serves the stream now).
type Notice struct {
	What    string // what is followed: a job's id
	Lost    string // the address whose stream broke ("" if none was reached)
	Reason  string // why, in a few words
	Through string // the address that serves the stream again; "" while reconnecting
}

func (n Notice) String() string {
	lost := "lost the node's stream"
	if n.Lost != "" {
		lost = "lost the stream from " + n.Lost
	}
	if n.Reason != "" {
		lost += " (" + n.Reason + ")"
	}
	if n.Through == "" {
		return lost + "; reconnecting…"
	}
	return fmt.Sprintf("%s; following %s again through %s", lost, n.What, n.Through)
}

// Follower paces a long wait on a stream (a job's watch) that its node may
// break: while one is under way, a connection from which nothing arrives
// for Options.SilentAfter is closed as dead (a SIGKILLed node says
// nothing; the stream would hang until the idle timeout); a stream that
// broke is opened again at once, through another node first, then after
// pauses that never exceed a second. Close it when the wait ends.
type Follower struct {
	c      *Client
	what   string
	fails  int       // attempts that failed since the stream last delivered
	tried  time.Time // when the last attempt began
	lost   string
	reason string
	close  func()
}

// Follow starts following what (a job's id, for the notices).
func (c *Client) Follow(what string) *Follower {
	return &Follower{c: c, what: what, close: sync.OnceFunc(c.watchSilence())}
}

// Close ends the follow.
func (f *Follower) Close() { f.close() }

// Delivered records that the stream delivered: after a break, Notify is
// told through which node it follows again.
func (f *Follower) Delivered() {
	if f.fails == 0 {
		return
	}
	if f.c.Notify != nil {
		f.c.Notify(Notice{What: f.what, Lost: f.lost, Reason: f.reason, Through: f.c.Answered()})
	}
	f.fails, f.lost, f.reason = 0, "", ""
}

// Broke records that the stream broke, or could not be opened, with err,
// and waits before the next attempt (not at all before the first after a
// break). The node whose stream broke is dialled last next time. It
// returns false if ctx ended first.
func (f *Follower) Broke(ctx context.Context, err error) bool {
	addr := f.c.Answered()
	if f.fails == 0 {
		f.lost, f.reason = addr, shortReason(f.c, err)
		if f.c.Notify != nil {
			f.c.Notify(Notice{What: f.what, Lost: f.lost, Reason: f.reason})
		}
	}
	f.c.mu.Lock()
	f.c.avoid = addr
	f.c.mu.Unlock()
	pause := reconnectPauses[min(f.fails, len(reconnectPauses)-1)] - time.Since(f.tried)
	f.fails++
	if ctx.Err() != nil {
		return false
	}
	if pause > 0 {
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	f.tried = time.Now()
	return true
}

// shortReason says in a few words why a stream broke.
func shortReason(c *Client, err error) string {
	var app *quic.ApplicationError
	var idle *quic.IdleTimeoutError
	var reset *quic.StatelessResetError
	switch {
	case errors.As(err, &app) && !app.Remote && app.ErrorCode == silentCode:
		return app.ErrorMessage
	case errors.As(err, &reset):
		return "the node restarted"
	case errors.As(err, &idle):
		return "no answer"
	case errors.As(err, &app) && app.Remote:
		return "the node closed the connection"
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() != connect.CodeUnknown && ce.Code() != connect.CodeUnavailable {
		return ce.Code().String()
	}
	msg := c.Explain(err).Message
	if len(msg) > 100 {
		msg = msg[:100] + "…"
	}
	return strings.TrimSpace(msg)
}

// watchSilence starts the silence watch (unless it runs already) and
// returns the function that stops it when no other Follower needs it.
func (c *Client) watchSilence() (stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.followers++
	if c.followers == 1 {
		done := make(chan struct{})
		c.stopSilence = done
		go func() {
			t := time.NewTicker(silenceTick)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case now := <-t.C:
					c.checkSilence(now)
				}
			}
		}()
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.followers--; c.followers == 0 {
			close(c.stopSilence)
		}
	}
}

// checkSilence closes the current connection if nothing has arrived on it
// for SilentAfter (plus four round trips), and has the next dial try the
// other nodes first. A check that comes late (this process was starved of
// CPU, or the watch just started) judges nothing: the packets may be
// waiting to be read.
func (c *Client) checkSilence(now time.Time) {
	c.mu.Lock()
	stalled := now.Sub(c.checked) > 5*silenceTick
	c.checked = now
	conn := c.conn
	if conn == nil || conn.Context().Err() != nil {
		c.mu.Unlock()
		return
	}
	st := conn.ConnectionStats()
	if stalled || st.PacketsReceived != c.heardPackets {
		c.heard, c.heardPackets = now, st.PacketsReceived
		c.mu.Unlock()
		return
	}
	limit := c.opts.SilentAfter + 4*st.SmoothedRTT
	if now.Sub(c.heard) < limit {
		c.mu.Unlock()
		return
	}
	silent := now.Sub(c.heard)
	c.conn, c.avoid = nil, c.answered
	c.mu.Unlock()
	conn.CloseWithError(silentCode, fmt.Sprintf("nothing heard from it for %s", silent.Round(100*time.Millisecond)))
}
