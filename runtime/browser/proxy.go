package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds one outbound connection the egress proxy makes.
const dialTimeout = 10 * time.Second

// egressProxy is the per-job HTTP proxy every connection of the job's
// browser context goes through. It is the backstop behind Fetch-domain
// interception: it also sees what Fetch cannot (WebSockets, preconnects,
// workers and cross-site iframes in other renderer processes), and it dials
// only addresses that passed the job's policy, so a DNS answer cannot change
// between check and connect.
type egressProxy struct {
	// bound is the job the proxy serves: its policy and recorder. A proxy
	// made ahead of a job (a ready context, see pool.go) is bound to a
	// policy that admits nothing until a job takes it.
	bound atomic.Pointer[proxyBinding]
	log   *slog.Logger
	ln    net.Listener
	srv   *http.Server
	tr    *http.Transport

	mu     sync.Mutex
	closed bool
	tunnel map[net.Conn]struct{} // hijacked connections, closed by Close
	wg     sync.WaitGroup
}

func startProxy(pol *policy, rec *recorder, log *slog.Logger) (*egressProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("browser: starting the egress proxy: %w", err)
	}
	p := &egressProxy{log: log, ln: ln, tunnel: map[net.Conn]struct{}{}}
	p.bind(pol, rec)
	p.tr = &http.Transport{
		DialContext:           p.dial,
		Proxy:                 nil, // never chain to the worker's own proxy settings
		ForceAttemptHTTP2:     false,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL = r.In.URL
			r.Out.Host = r.In.Host
			r.Out.Header.Del("Proxy-Connection")
			r.Out.Header.Del("Proxy-Authorization")
		},
		Transport: p.tr,
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var be *BlockedError
			if errors.As(err, &be) {
				p.refuse(w)
				return
			}
			// The upstream could not be reached. Drop the connection, so
			// the browser sees the network error it would see without
			// the proxy: a navigation fails (an empty 502 would load as a
			// blank page and the step would succeed), a sub-resource is
			// missing. The recorder keeps the reason for the step's
			// message, of a document's fetch only (a sub-resource's
			// failure is not why a navigation failed), and not when the
			// browser itself went away (a crash named an image it was
			// loading as the page that was unreachable).
			if dest := r.Header.Get("Sec-Fetch-Dest"); (dest == "" || dest == "document" || dest == "iframe" || dest == "frame") &&
				!errors.Is(err, context.Canceled) && r.Context().Err() == nil {
				p.rec().fetchFailed(r.URL.String(), err)
			}
			p.refuse(w)
		},
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, rp) }),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// proxyBinding is what an egressProxy enforces and where it reports.
type proxyBinding struct {
	pol *policy
	rec *recorder
}

// bind makes the proxy enforce pol and report to rec from now on.
func (p *egressProxy) bind(pol *policy, rec *recorder) {
	p.bound.Store(&proxyBinding{pol: pol, rec: rec})
}

func (p *egressProxy) pol() *policy   { return p.bound.Load().pol }
func (p *egressProxy) rec() *recorder { return p.bound.Load().rec }

// URL is the proxy address for target.CreateBrowserContext.
func (p *egressProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *egressProxy) serve(w http.ResponseWriter, r *http.Request, rp *httputil.ReverseProxy) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Host == "" || r.URL.Scheme != "http" {
		http.Error(w, "palyra egress proxy: only absolute http:// requests and CONNECT", http.StatusBadRequest)
		return
	}
	if err := p.pol().checkURL(r.Context(), r.URL.String()); err != nil {
		dest := r.Header.Get("Sec-Fetch-Dest")
		p.block(r.URL.String(), dest, err)
		if dest == "document" {
			// A top-level navigation (frames say "iframe"). The header is
			// set by the browser, not by page script; it only chooses how
			// the failure is reported.
			var be *BlockedError
			if errors.As(err, &be) {
				p.rec().blockNavigation(be)
			}
		}
		p.refuse(w)
		return
	}
	rp.ServeHTTP(w, r)
}

// connect serves a CONNECT tunnel (https and WebSockets).
func (p *egressProxy) connect(w http.ResponseWriter, r *http.Request) {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		http.Error(w, "bad CONNECT target", http.StatusBadRequest)
		return
	}
	target := r.Host // a tunnel: https or a WebSocket; the scheme is not visible here
	if _, err := p.pol().checkHost(r.Context(), host); err != nil {
		p.block(target, "connect", &BlockedError{URL: target, Reason: err.Error()})
		http.Error(w, "blocked by the job's network policy", http.StatusForbidden)
		return
	}
	upstream, err := p.dial(r.Context(), "tcp", net.JoinHostPort(host, port))
	if err != nil {
		http.Error(w, "upstream unreachable", http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if !p.track(client, upstream) {
		return
	}
	_, _ = client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	done := make(chan struct{}, 2)
	go func() {
		if n := buf.Reader.Buffered(); n > 0 {
			b, _ := buf.Reader.Peek(n)
			_, _ = upstream.Write(b)
		}
		_, _ = io.Copy(upstream, client)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, upstream)
		done <- struct{}{}
	}()
	<-done
	p.untrack(client, upstream)
}

// dial connects to addr after the policy check, to the checked addresses.
func (p *egressProxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := p.pol().checkHost(ctx, host)
	if err != nil {
		return nil, &BlockedError{URL: addr, Reason: err.Error()}
	}
	d := net.Dialer{Timeout: dialTimeout}
	if len(addrs) == 0 { // AllowPrivate: no pinning needed
		return d.DialContext(ctx, network, addr)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port %q", port)
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(pn)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// refuse drops the client connection without a response, so the browser
// sees a network error rather than a page it could render.
func (p *egressProxy) refuse(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	http.Error(w, "blocked by the job's network policy", http.StatusForbidden)
}

func (p *egressProxy) block(url, kind string, err error) {
	reason := err.Error()
	var be *BlockedError
	if errors.As(err, &be) {
		reason = be.Reason
	}
	if kind == "" {
		kind = "other"
	}
	p.rec().blocked(url, kind, reason, "proxy")
}

func (p *egressProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.tunnel[c] = struct{}{}
	}
	p.wg.Add(1)
	return true
}

func (p *egressProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	for _, c := range conns {
		c.Close()
		delete(p.tunnel, c)
	}
	p.mu.Unlock()
	p.wg.Done()
}

// Close stops the proxy and every connection through it.
func (p *egressProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnel {
		c.Close()
	}
	p.mu.Unlock()
	_ = p.srv.Close()
	p.tr.CloseIdleConnections()
	p.wg.Wait()
}
