package mesh

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
)

// ErrClosed is returned by operations on a closed Transport.
var ErrClosed = errors.New("mesh: transport closed")

// Application error codes sent when mesh closes a connection or stream.
const (
	codeClosed     quic.ApplicationErrorCode = 0x100 // transport shutting down
	codeFault      quic.ApplicationErrorCode = 0x101 // fault injection
	codeNoCert     quic.ApplicationErrorCode = 0x102 // peer ALPN without client certificate
	codeBadALPN    quic.ApplicationErrorCode = 0x103 // unknown ALPN (cannot happen with crypto/tls)
	codeAPIBacklog quic.ApplicationErrorCode = 0x104 // nobody takes API conns
	codeSuperseded quic.ApplicationErrorCode = 0x106 // the peer connected anew and no longer answers on this conn (0x105: codeRefused)
)

// Stream error codes sent when mesh resets a stream.
const (
	streamDone      quic.StreamErrorCode = 0x0 // normal full close
	streamNoTag     quic.StreamErrorCode = 0x1 // no consumer for the tag
	streamQueueFull quic.StreamErrorCode = 0x2 // consumer's queue full
	streamShutdown  quic.StreamErrorCode = 0x3 // transport or consumer closed
	streamBadPacket quic.StreamErrorCode = 0x4 // oversized gossip packet
)

// apiBacklog bounds accepted API conns waiting for APIConns' reader.
const apiBacklog = 64

// Transport is one UDP socket carrying QUIC for the API and for peers.
type Transport struct {
	log       *slog.Logger
	udp       *net.UDPConn
	qt        *quic.Transport
	ln        *quic.Listener
	peerTLS   *tls.Config // client side, ALPNPeer
	apiTLS    *tls.Config // client side, ALPNAPI
	qconf     *quic.Config
	advertise string
	peerOK    func(tls.ConnectionState) error

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	apiCh  chan *quic.Conn
	fault  atomic.Pointer[FaultFunc]
	gossip atomic.Pointer[gossipTransport]

	mu         sync.Mutex
	closed     bool
	conns      map[*quic.Conn]string    // every live conn → its peer-cache key ("" for API conns)
	born       map[*quic.Conn]time.Time // when each conn in conns was tracked
	refused    refusals                 // why peer connections ended: this node's certificate refused?
	peers      map[string]*peerEntry    // canonical remote addr → conn used for outgoing peer traffic
	consumers  map[Tag]*consumer        // who takes inbound streams of each tag
	closer     sync.Once
	apiRefused atomic.Bool // API handshakes are refused (RefuseAPI)
}

// RefuseAPI makes the transport refuse API connections (ALPNAPI) in their
// handshake while refuse is true: a node that is starting (joining,
// catching up with its log) serves no API yet, and a call it took waited,
// unanswered, until the node served; refused, a client tries another node
// at once. The refusal is an ALPN mismatch (TLS alert
// no_application_protocol, QUIC CRYPTO_ERROR 0x178): a handshake carries
// no reason text, and this alert is one a palyra client can tell apart
// (APIRefusedAlert). Peer connections are never refused by
// it.
func (t *Transport) RefuseAPI(refuse bool) { t.apiRefused.Store(refuse) }

// APIRefusedAlert is the text of the handshake error a client gets from a
// transport refusing API connections.
const APIRefusedAlert = "tls: no application protocol"

// gateAPI wraps srv's GetConfigForClient so that API handshakes are
// refused while RefuseAPI says so.
func (t *Transport) gateAPI(srv *tls.Config) *tls.Config {
	inner := srv.GetConfigForClient
	refusing := srv.Clone()
	refusing.NextProtos = []string{"palyra-not-serving"}
	srv.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		if t.apiRefused.Load() && !slices.Contains(hi.SupportedProtos, ALPNPeer) {
			return refusing, nil
		}
		if inner != nil {
			return inner(hi)
		}
		return nil, nil
	}
	return srv
}

// Listen binds the UDP socket, starts the QUIC listener and returns the
// Transport. Close releases everything it started.
func Listen(cfg Config) (*Transport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ua, err := net.ResolveUDPAddr("udp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("mesh: resolve listen address %q: %w", cfg.ListenAddr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, listenError(cfg.ListenAddr, err)
	}
	advertise := cfg.AdvertiseAddr
	if advertise == "" {
		advertise = udp.LocalAddr().String()
		if err := checkDialAddr(advertise); err != nil {
			udp.Close()
			return nil, fmt.Errorf("mesh: listening on wildcard %s; set Config.AdvertiseAddr to the address peers dial: %w", advertise, err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		log:       log.With("component", "mesh", "addr", advertise),
		udp:       udp,
		peerTLS:   tlsWithALPN(cfg.ClientTLS, ALPNPeer),
		apiTLS:    tlsWithALPN(cfg.ClientTLS, ALPNAPI),
		qconf:     quicConfig(cfg.QUIC),
		advertise: advertise,
		peerOK:    cfg.PeerFilter,
		ctx:       ctx,
		cancel:    cancel,
		apiCh:     make(chan *quic.Conn, apiBacklog),
		conns:     map[*quic.Conn]string{},
		born:      map[*quic.Conn]time.Time{},
		peers:     map[string]*peerEntry{},
		consumers: map[Tag]*consumer{},
	}
	key := cfg.StatelessResetKey
	if key == nil {
		key = new(quic.StatelessResetKey)
		rand.Read(key[:])
	}
	t.qt = &quic.Transport{
		Conn:              udp,
		StatelessResetKey: key,
		ConnContext:       t.admit,
	}
	t.apiRefused.Store(cfg.RefuseAPI)
	t.ln, err = t.qt.Listen(t.gateAPI(tlsWithALPN(cfg.ServerTLS, ALPNAPI, ALPNPeer)), t.qconf)
	if err != nil {
		t.qt.Close()
		udp.Close()
		cancel()
		return nil, fmt.Errorf("mesh: start QUIC listener on %s: %w", udp.LocalAddr(), err)
	}
	t.wg.Add(1)
	go t.acceptLoop()
	t.log.Debug("mesh listening", "listen", udp.LocalAddr().String())
	return t, nil
}

// Addr is the bound UDP address (with the real port when ListenAddr had 0).
func (t *Transport) Addr() net.Addr { return t.udp.LocalAddr() }

// AdvertiseAddr is the host:port peers dial; Raft and memberlist publish it.
func (t *Transport) AdvertiseAddr() string { return t.advertise }

// APIConns delivers accepted connections that negotiated ALPNAPI; serve each
// with http3.Server.ServeQUICConn. Connections are refused while 64 wait
// unread. The channel is closed by Close.
func (t *Transport) APIConns() <-chan *quic.Conn { return t.apiCh }

// admit refuses handshakes from peers cut off by SetFault.
func (t *Transport) admit(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	if t.faulted(info.RemoteAddr) {
		return nil, ErrPartitioned
	}
	return ctx, nil
}

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept(t.ctx)
		if err != nil {
			return
		}
		t.adoptAccepted(c)
	}
}

// adoptAccepted routes a handshaken inbound conn by its ALPN.
func (t *Transport) adoptAccepted(c *quic.Conn) {
	st := c.ConnectionState().TLS
	switch st.NegotiatedProtocol {
	case ALPNAPI:
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.closed {
			c.CloseWithError(codeClosed, "shutting down")
			return
		}
		select {
		case t.apiCh <- c:
			t.trackLocked(c, "")
		default:
			t.log.Warn("refusing API connection: nobody reads APIConns", "remote", c.RemoteAddr().String())
			c.CloseWithError(codeAPIBacklog, "API backlog full")
		}
	case ALPNPeer:
		if len(st.PeerCertificates) == 0 {
			t.log.Warn("refusing peer connection without client certificate", "remote", c.RemoteAddr().String())
			c.CloseWithError(codeNoCert, "peer connections need a client certificate")
			return
		}
		if t.peerOK != nil {
			if err := t.peerOK(st); err != nil {
				t.log.Warn("refusing peer connection", "remote", c.RemoteAddr().String(), "err", err)
				c.CloseWithError(codeRefused, "not allowed on the peer protocol")
				return
			}
		}
		t.adoptPeer(c)
	default:
		c.CloseWithError(codeBadALPN, "unknown ALPN")
	}
}

// trackLocked registers c so Close and SetFault reach it, and starts a
// watcher that forgets it when it dies. t.mu must be held and t.closed false.
func (t *Transport) trackLocked(c *quic.Conn, key string) {
	t.conns[c] = key
	t.born[c] = time.Now()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		<-c.Context().Done()
		t.connEnded(c, key)
		t.forget(c)
	}()
}

// forget drops c from the tracking set and the peer cache.
func (t *Transport) forget(c *quic.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key, ok := t.conns[c]
	if !ok {
		return
	}
	delete(t.conns, c)
	delete(t.born, c)
	if e := t.peers[key]; e != nil && e.conn == c {
		delete(t.peers, key)
	}
}

// goTracked runs f in a goroutine that Close waits for; false when closed.
func (t *Transport) goTracked(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// Close closes every connection (telling peers), the listener and the
// socket, unblocks all Accepts, waits for mesh's goroutines and closes the
// APIConns channel. It is safe to call more than once.
func (t *Transport) Close() error {
	var err error
	t.closer.Do(func() {
		t.mu.Lock()
		t.closed = true
		conns := make([]*quic.Conn, 0, len(t.conns))
		for c := range t.conns {
			conns = append(conns, c)
		}
		t.mu.Unlock()
		t.cancel()
		t.ln.Close()
		for _, c := range conns {
			c.CloseWithError(codeClosed, "node shutting down")
		}
		err = t.qt.Close()
		t.wg.Wait()
		if cerr := t.udp.Close(); err == nil {
			err = cerr
		}
		close(t.apiCh)
		for c := range t.apiCh {
			c.CloseWithError(codeClosed, "node shutting down")
		}
		t.log.Debug("mesh closed")
	})
	return err
}

// ListenError is a failure to bind the transport's UDP socket. It names
// the address once (net's own error repeats it).
type ListenError struct {
	Addr string
	Err  error // the system's reason, e.g. bind: address already in use
}

func (e *ListenError) Error() string {
	msg := "cannot listen on " + e.Addr + ": " + e.Err.Error()
	if errors.Is(e.Err, syscall.EADDRINUSE) {
		msg += " (another process uses this UDP port)"
	}
	return msg
}

func (e *ListenError) Unwrap() error { return e.Err }

func listenError(addr string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		err = oe.Err
	}
	return &ListenError{Addr: addr, Err: err}
}

// CheckListen reports, as a *ListenError, whether a UDP socket can be
// bound on addr now. A caller checks before doing what a failed bind
// would leave half done; the port may still be taken in between.
func CheckListen(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return listenError(addr, err)
	}
	return pc.Close()
}
