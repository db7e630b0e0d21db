// Package client is the Go client of a Palyra node's API: Connect over
// HTTP/3 (QUIC) with the caller's mTLS credential. The CLI uses only this
// to talk to nodes.
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
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

// DefaultAddr is where a local node listens by default.
const DefaultAddr = "127.0.0.1:7444"

// Defaults of Options.
const (
	// DefaultDialTimeout bounds one address's QUIC handshake. A node on a
	// LAN answers in milliseconds; this is generous for a WAN and short
	// enough that a dead node costs little.
	DefaultDialTimeout = 2 * time.Second
	// DefaultStagger is how long a dial waits for one address before it
	// also tries the next (the first to answer wins), so a dead first
	// address costs a quarter of a second, not a whole timeout.
	DefaultStagger = 250 * time.Millisecond
)

// Options tune how a Client reaches a cluster through several nodes.
type Options struct {
	DialTimeout time.Duration // per address (default DefaultDialTimeout)
	Stagger     time.Duration // before trying the next address too (default DefaultStagger)
	// CallTimeout bounds each unary call whose context has no deadline of
	// its own (0: none, the default for a library user). Streaming calls
	// (submit-and-wait, watch, logs, snapshots) are never bounded by it:
	// they last as long as what they follow. The CLI sets it from
	// --call-timeout, so a node that accepted a call and never answers
	// cannot hold a command for ever.
	CallTimeout time.Duration
	// UnreachableHint is the hint given when no address answers (default:
	// check the nodes and UDP). The CLI says what fits the credential: a
	// node's data dir or a paired device.
	UnreachableHint string
	// SilentAfter is how long a connection may stay silent (no packet at
	// all: keep-alives go every 500 ms, and a live node acknowledges each)
	// while a Follower waits on it, before it is taken for dead and closed,
	// so the wait goes on through another node (default DefaultSilentAfter;
	// four round trips are added on a slow path).
	SilentAfter time.Duration
}

// DefaultSilentAfter is Options.SilentAfter's default: four keep-alives
// unanswered. A node SIGKILLed or cut off sends nothing to say so; without
// this a waiting stream would notice only at the idle timeout (8 s).
const DefaultSilentAfter = 2 * time.Second

// Client talks to a cluster through one of its nodes. It knows several
// node addresses and connects to the first that answers, trying the one
// that answered last first; when that connection fails, the next call
// dials again, so a client outlives any one node. A call in flight when
// its node dies fails (it may have taken effect); only connecting is
// retried, and a unary call a node answers "unimplemented" (older
// software: it did not run the call) is made again through the other
// nodes (older.go). A Follower (a long wait on a stream) is more eager: it takes a
// silent connection for dead within seconds, and tries the other nodes
// first when it reconnects.
type Client struct {
	Addr     string   // the first address, as given
	Addrs    []string // every address it may dial, in order
	Jobs     palyrav1connect.JobServiceClient
	Node     palyrav1connect.NodeServiceClient
	Identity palyrav1connect.IdentityServiceClient
	Policy   palyrav1connect.PolicyServiceClient
	Secrets  palyrav1connect.SecretServiceClient
	KV       palyrav1connect.KVServiceClient
	// Snapshots streams cluster snapshots (palyra snapshot save).
	Snapshots palyrav1connect.SnapshotServiceClient
	// Browser drives interactive browser sessions (palyra browser).
	Browser palyrav1connect.BrowserServiceClient
	// Skills is the skill registry (palyra skill install, run, …).
	Skills palyrav1connect.SkillServiceClient
	// Approvals approves and denies jobs waiting for approval.
	Approvals palyrav1connect.ApprovalServiceClient
	// Audit reads the audit journal.
	Audit palyrav1connect.AuditServiceClient
	// Hooks binds events to skill tools.
	Hooks palyrav1connect.HookServiceClient
	// Notify, when set, is told when a Follower loses its node's stream
	// and when it follows again, and through which node (the CLI prints
	// it on stderr).
	Notify func(Notice)
	tr     *http3.Transport
	// pinned carries the calls retried on another node (older.go), one
	// connection per address.
	pinned *http3.Transport
	opts   Options

	mu       sync.Mutex
	answered string // the address of the current (or last) connection
	qt       *quic.Transport
	closed   bool
	onClose  []func()
	// learned are the cluster's node addresses Peers found that Addrs
	// lacks: dialled after Addrs.
	learned []string
	// avoid is the address of a connection that went silent or whose
	// stream broke: dialled last until it answers again.
	avoid string
	// conn is the current connection, heard the last time a packet was
	// seen arriving on it (at heardPackets), for the silence watch.
	conn         *quic.Conn
	heard        time.Time
	heardPackets uint64
	checked      time.Time     // the silence watch's last look
	followers    int           // Followers under way
	stopSilence  chan struct{} // ends the silence watch
}

// New returns a client for the node at addr using cred. No connection is
// made until the first call.
func New(addr string, cred *identity.Credential) (*Client, error) {
	return NewCluster([]string{addr}, cred, Options{})
}

// NewCluster returns a client that reaches the cluster through any of
// addrs (tried in order, the one that answered last first). No connection
// is made until the first call.
func NewCluster(addrs []string, cred *identity.Credential, o Options) (*Client, error) {
	addrs = dedup(addrs)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no node address: want HOST:PORT, e.g. %s", DefaultAddr)
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("bad node address %q: want HOST:PORT, e.g. %s", a, DefaultAddr)
		}
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Stagger <= 0 {
		o.Stagger = DefaultStagger
	}
	if o.SilentAfter <= 0 {
		o.SilentAfter = DefaultSilentAfter
	}
	c := &Client{Addr: addrs[0], Addrs: addrs, opts: o}
	c.tr = &http3.Transport{
		TLSClientConfig: identity.ClientTLSConfig(cred, []string{http3.NextProtoH3}, nil),
		QUICConfig: &quic.Config{
			HandshakeIdleTimeout: o.DialTimeout,
			// A node that stops answering is given up after 8 s of
			// silence, then the next call dials another. Keep-alives go
			// every 500 ms (a few bytes), so a Follower can tell a
			// silent node from a quiet one much sooner (SilentAfter).
			MaxIdleTimeout:  idleTimeout,
			KeepAlivePeriod: keepAlive,
		},
		Dial: c.dial,
	}
	c.pinned = &http3.Transport{
		TLSClientConfig: c.tr.TLSClientConfig,
		// No keep-alives: an unused pinned connection goes after the idle
		// timeout.
		QUICConfig: &quic.Config{HandshakeIdleTimeout: o.DialTimeout, MaxIdleTimeout: 8 * time.Second},
		Dial:       c.dialPinned,
	}
	hc := routedHTTP{shared: &http.Client{Transport: c.tr}, pinned: &http.Client{Transport: c.pinned}}
	// Every call names the first address; the dial decides which node
	// serves it (nodes are verified by certificate, not by name).
	base := "https://" + addrs[0]
	// Sends are bounded by the largest request a node takes (a module plus
	// a job array's inputs, node/api.MaxRequestBytes); requests under 64 KiB
	// go uncompressed (gzip costs more CPU than it saves on small messages).
	// A call a node lacks is tried on the others (olderNodes), each
	// attempt bounded by the call timeout on its own.
	opts := []connect.ClientOption{connect.WithReadMaxBytes(64 << 20), connect.WithSendMaxBytes(96 << 20), connect.WithCompressMinBytes(64 << 10),
		connect.WithInterceptors(olderNodes{c}, goingAway{c})}
	if o.CallTimeout > 0 {
		opts = append(opts, connect.WithInterceptors(callTimeout(o.CallTimeout)))
	}
	c.Jobs = palyrav1connect.NewJobServiceClient(hc, base, opts...)
	c.Node = palyrav1connect.NewNodeServiceClient(hc, base, opts...)
	c.Identity = palyrav1connect.NewIdentityServiceClient(hc, base, opts...)
	c.Policy = palyrav1connect.NewPolicyServiceClient(hc, base, opts...)
	c.Secrets = palyrav1connect.NewSecretServiceClient(hc, base, opts...)
	c.KV = palyrav1connect.NewKVServiceClient(hc, base, opts...)
	c.Snapshots = palyrav1connect.NewSnapshotServiceClient(hc, base, opts...)
	c.Browser = palyrav1connect.NewBrowserServiceClient(hc, base, opts...)
	c.Skills = palyrav1connect.NewSkillServiceClient(hc, base, opts...)
	c.Approvals = palyrav1connect.NewApprovalServiceClient(hc, base, opts...)
	c.Audit = palyrav1connect.NewAuditServiceClient(hc, base, opts...)
	c.Hooks = palyrav1connect.NewHookServiceClient(hc, base, opts...)
	return c, nil
}

func dedup(addrs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range addrs {
		if a = strings.TrimSpace(a); a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// Answered is the address of the node the client is (or was last)
// connected to; "" before any connection.
func (c *Client) Answered() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered
}

// OnClose registers f to run at the start of Close, while the connection
// is still usable (the CLI records what it learned then).
func (c *Client) OnClose(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onClose = append(c.onClose, f)
}

// Peers asks the cluster for the addresses of its nodes: the one this
// client reached first, then every node that node knows (raft servers and
// alive members). The client dials those it did not know too, after its
// own, when its node goes away.
func (c *Client) Peers(ctx context.Context) ([]string, error) {
	resp, err := c.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
	if err != nil {
		return nil, err
	}
	peers := dedup(append([]string{c.Answered()}, resp.Msg.Peers...))
	c.learn(peers)
	return peers, nil
}

// learn adds the addresses among addrs that the client does not know to
// those it dials.
func (c *Client) learn(addrs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil || slices.Contains(c.Addrs, a) || slices.Contains(c.learned, a) {
			continue
		}
		c.learned = append(c.learned, a)
	}
}

// Reached is the address of the node the client reached, or (before any
// connection) the first it would try.
func (c *Client) Reached() string {
	if a := c.Answered(); a != "" {
		return a
	}
	return c.Addr
}

// Close releases the client's QUIC connection and socket.
func (c *Client) Close() error {
	c.mu.Lock()
	hooks := c.onClose
	c.onClose = nil
	c.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	err := c.tr.Close()
	c.pinned.Close()
	c.mu.Lock()
	qt := c.qt
	c.closed = true
	c.mu.Unlock()
	if qt != nil {
		qt.Close()
		qt.Conn.Close()
	}
	return err
}

// transport returns the client's QUIC transport on its own UDP socket,
// made on first use.
func (c *Client) transport() (*quic.Transport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, http3.ErrTransportClosed
	}
	if c.qt == nil {
		udp, err := net.ListenUDP("udp", nil)
		if err != nil {
			return nil, fmt.Errorf("open a UDP socket: %w", err)
		}
		c.qt = &quic.Transport{Conn: udp}
	}
	return c.qt, nil
}

// order is the dial order: the address that answered last, then the
// others as given, then those learned from the cluster; an address to
// avoid (its connection went silent, or a Follower's stream broke there)
// comes last.
func (c *Client) order() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.Addrs)+len(c.learned)+1)
	if c.answered != "" {
		out = append(out, c.answered)
	}
	for _, a := range slices.Concat(c.Addrs, c.learned) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if i := slices.Index(out, c.avoid); i >= 0 && len(out) > 1 {
		out = append(slices.Delete(out, i, i+1), c.avoid)
	}
	return out
}

// UnreachableError says that no address answered, and why each did not.
type UnreachableError struct {
	Addrs []string
	Errs  []error // Errs[i] is why Addrs[i] did not answer
}

func (e *UnreachableError) Error() string {
	parts := make([]string, len(e.Addrs))
	for i, a := range e.Addrs {
		parts[i] = fmt.Sprintf("%s: %v", a, e.Errs[i])
	}
	return "no node answered (" + strings.Join(parts, "; ") + ")"
}

// dial connects to the first address that completes a handshake. It
// starts with the preferred address and, every Stagger without an answer
// (or at once when one fails), also tries the next; the first handshake
// to complete wins and the others are abandoned. Only the handshake is
// raced: no request has been sent yet, so this is safe for any call.
func (c *Client) dial(ctx context.Context, _ string, tlsCfg *tls.Config, qcfg *quic.Config) (*quic.Conn, error) {
	qt, err := c.transport()
	if err != nil {
		return nil, err
	}
	addrs := c.order()
	type result struct {
		i    int
		conn *quic.Conn
		err  error
	}
	results := make(chan result, len(addrs))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next, pending := 0, 0
	start := func() {
		i := next
		next++
		pending++
		go func() {
			dctx, dcancel := context.WithTimeout(ctx, c.opts.DialTimeout)
			defer dcancel()
			ua, err := net.ResolveUDPAddr("udp", addrs[i])
			if err != nil {
				results <- result{i: i, err: err}
				return
			}
			conn, err := qt.Dial(dctx, ua, tlsCfg, qcfg)
			results <- result{i: i, conn: conn, err: err}
		}()
	}
	start()
	stagger := time.NewTimer(c.opts.Stagger)
	defer stagger.Stop()
	errs := make([]error, len(addrs))
	for pending > 0 {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				c.mu.Lock()
				c.answered = addrs[r.i]
				if c.avoid == c.answered {
					c.avoid = ""
				}
				c.conn, c.heard, c.heardPackets = r.conn, time.Now(), r.conn.ConnectionStats().PacketsReceived
				c.mu.Unlock()
				go func(n int) { // close the handshakes that lost the race
					for ; n > 0; n-- {
						if late := <-results; late.conn != nil {
							late.conn.CloseWithError(0, "")
						}
					}
				}(pending)
				return r.conn, nil
			}
			errs[r.i] = r.err
			if next < len(addrs) {
				start()
				stagger.Reset(c.opts.Stagger)
			}
		case <-stagger.C:
			if next < len(addrs) {
				start()
				stagger.Reset(c.opts.Stagger)
			}
		}
	}
	if err := ctx.Err(); err != nil && len(addrs) == 1 {
		return nil, err
	}
	return nil, &UnreachableError{Addrs: addrs, Errs: errs}
}

// Error is a failure as the user should see it.
type Error struct {
	Code    string
	Message string
	Hint    string
}

func (e *Error) Error() string { return e.Message }

// Explain turns any error from a call into an *Error with a hint: the
// node's own {code, message, hint} when it sent one, else a diagnosis of
// the transport failure.
func (c *Client) Explain(err error) *Error {
	if err == nil {
		return nil
	}
	var out *Error
	if errors.As(err, &out) {
		return out
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if pe, ok := v.(*palyrav1.Error); ok {
					return &Error{Code: pe.Code, Message: pe.Message, Hint: pe.Hint}
				}
			}
		}
		if ce.Code() == connect.CodeUnimplemented {
			// A node of an older version than this CLI: the call is newer
			// than its software (a rolling upgrade under way). Every node
			// the client knows was asked (olderNodes).
			var older *olderError
			if errors.As(err, &older) {
				return &Error{Code: "unimplemented", Message: fmt.Sprintf("none of %s has this call: they run older software than this palyra (%s)", strings.Join(older.Addrs, ", "), ce.Message()),
					Hint: "upgrade those nodes, or point --addr at an upgraded one ('palyra nodes' shows each node's version)"}
			}
			node := c.Reached()
			if node == "" {
				node = "the node"
			}
			return &Error{Code: "unimplemented", Message: fmt.Sprintf("%s does not have this call: it runs older software than this palyra (%s)", node, ce.Message()),
				Hint: "upgrade that node, or point --addr at an upgraded one ('palyra nodes' shows each node's version)"}
		}
		if ce.Code() != connect.CodeUnavailable && ce.Code() != connect.CodeUnknown {
			return &Error{Code: strings.ReplaceAll(ce.Code().String(), " ", "_"), Message: ce.Message()}
		}
	}
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return c.unreachable(ue)
	}
	return c.transportError(c.Reached(), err)
}

// noAnswer reports whether a dial error means nothing answered (rather
// than that a node answered and refused us).
func noAnswer(err error) bool {
	var idle *quic.IdleTimeoutError
	var hs *quic.HandshakeTimeoutError
	var op *net.OpError
	return errors.As(err, &idle) || errors.As(err, &hs) || errors.As(err, &op) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		strings.Contains(err.Error(), "timeout: no recent network activity")
}

// unreachable explains a dial that reached no node: when a node answered
// and refused (a credential problem), that is the news; when none
// answered, the message names every address tried.
func (c *Client) unreachable(ue *UnreachableError) *Error {
	for i, e := range ue.Errs {
		if e != nil && !noAnswer(e) {
			return c.transportError(ue.Addrs[i], e)
		}
	}
	hint := c.opts.UnreachableHint
	if hint == "" {
		hint = "check that the nodes are running and that UDP to them is not blocked, or point --addr / PALYRA_ADDR at a running node"
	}
	what := "at " + ue.Addrs[0]
	if len(ue.Addrs) > 1 {
		what = "at any of " + strings.Join(ue.Addrs, ", ")
	}
	how := "QUIC over UDP"
	if c.opts.DialTimeout > 0 {
		how += fmt.Sprintf(", %s each", c.opts.DialTimeout)
	}
	return &Error{Code: "unreachable", Message: fmt.Sprintf("no palyra node answered %s (%s)", what, how), Hint: hint}
}

// apiRefusedAlert is the handshake error of a node that refuses API
// connections because it does not serve yet (mesh.APIRefusedAlert; cli
// does not import mesh; node's TestStartingNodeRefusesAPICalls checks the
// two agree).
const apiRefusedAlert = "tls: no application protocol"

// idleTimeout is how long a connection may hear nothing from its node
// before it is closed (keep-alives go every 500 ms).
const idleTimeout = 8 * time.Second

// NodeStarting reports whether err is a node refusing the API in the
// handshake because it is still starting (joining its cluster, catching
// up): nothing was sent, and the same call may succeed in a moment.
func NodeStarting(err error) bool {
	return err != nil && strings.Contains(err.Error(), "(remote): "+apiRefusedAlert)
}

// CredentialRefused reports whether err is a node refusing this client's
// credential in the handshake (revoked, expired, another cluster's, or
// unknown to the cluster): no retry, on this node or another, can succeed
// with it.
func CredentialRefused(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "(remote): tls: bad certificate") || strings.Contains(msg, "(remote): tls: certificate required") ||
		strings.Contains(msg, "(remote): tls: revoked certificate") || credentialUnknown(err)
}

// credentialUnknown reports whether err is a node refusing this client's
// certificate as one its cluster signed but does not know (the alert
// certificate_unknown; node/identity.go): its ledger, checked with the
// leader, does not hold it.
func credentialUnknown(err error) bool {
	return err != nil && strings.Contains(err.Error(), "(remote): tls: unknown certificate")
}

// transportError explains a call's transport failure against addr.
func (c *Client) transportError(addr string, err error) *Error {
	msg := err.Error()
	var app *quic.ApplicationError
	if errors.As(err, &app) && !app.Remote && app.ErrorCode == silentCode {
		return &Error{Code: "unavailable", Message: fmt.Sprintf("the node at %s stopped answering (%s)", addr, app.ErrorMessage),
			Hint: "check that it runs ('palyra status'), or reach another node (--addr A,B,C; a paired device tries every node it knows)"}
	}
	var idle *quic.IdleTimeoutError
	var hs *quic.HandshakeTimeoutError
	var tlsAlert tls.AlertError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &idle) && !errors.As(err, &hs) && c.Answered() == addr:
		// The connection was up (this client's dial completed a handshake
		// with addr; a dial that fails comes as an UnreachableError) and
		// then nothing came back (a node killed or cut off mid-call): what
		// was sent may have taken effect, so this is an unknown outcome (a
		// keyed submission is sent again), not a node never reached. A
		// client without that dial (pairing) cannot tell, and says
		// unreachable.
		return &Error{Code: "unavailable", Message: fmt.Sprintf("the node at %s stopped answering during the call (nothing heard from it for %s): the call may or may not have taken effect", addr, idleTimeout),
			Hint: "check that it runs ('palyra status'), or reach another node (--addr A,B,C; a paired device tries every node it knows)"}
	case errors.As(err, &hs), strings.Contains(msg, "timeout: no recent network activity"):
		return c.unreachable(&UnreachableError{Addrs: []string{addr}, Errs: []error{err}})
	case strings.Contains(msg, "(remote): "+apiRefusedAlert):
		return &Error{Code: "unavailable",
			Message: fmt.Sprintf("the node at %s does not serve the API yet: it is starting (joining its cluster, catching up with its log)", addr),
			Hint:    "wait until its log says 'node ready' (seconds; longer while it catches up with a large log), or reach another node (--addr A,B,C; a paired device tries every node it knows)"}
	case credentialUnknown(err):
		return &Error{Code: "unauthenticated",
			Message: fmt.Sprintf("the node at %s refused this credential: its certificate is not known to the cluster (it may have been paired after the snapshot the cluster was restored from)", addr),
			Hint:    "pair again with 'palyra device pair' (a new code from 'palyra pair create' on an operator device)"}
	case CredentialRefused(err):
		return &Error{Code: "unauthenticated",
			Message: fmt.Sprintf("the node at %s refused this credential: it was revoked, has expired, or belongs to another cluster", addr),
			Hint:    "run 'palyra doctor' to see the certificate's state; if it was revoked, pair again with a new code"}
	case errors.As(err, &certErr), strings.Contains(msg, "certificate"), errors.As(err, &tlsAlert):
		return &Error{Code: "unauthenticated",
			Message: fmt.Sprintf("the node at %s and this credential do not trust each other: %v", addr, err),
			Hint:    "use the credential of this node's cluster (--data-dir), or pair this device with 'palyra device pair'; a device that ran no command while its cluster rotated its CA ('palyra ca rotate') keeps only the old root and must be paired again"}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: "deadline_exceeded", Message: fmt.Sprintf("request to %s timed out", addr),
			Hint: "check the node's health with 'palyra status'"}
	}
	return &Error{Code: "unavailable", Message: fmt.Sprintf("call to %s failed: %v", addr, err),
		Hint: "check that a node runs there ('palyra status') and that UDP to it is not blocked"}
}
