package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
)

// Errors Fetch returns besides *BlockedError; match them with errors.Is.
var (
	ErrBadRequest = errors.New("bad request")
	ErrTooLarge   = errors.New("too large")
	ErrTimeout    = errors.New("timed out")
	ErrNetwork    = errors.New("network error")
)

// maxRedirects bounds the hops one fetch follows.
const maxRedirects = 10

// Resolver is the part of *net.Resolver the client uses; tests replace it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options tunes a Client. Zero fields take defaults.
type Options struct {
	// Resolver resolves host names (default net.DefaultResolver).
	Resolver Resolver
	// Timeout bounds one Fetch, redirects included (default 10 s).
	Timeout time.Duration
	// TLS overrides the TLS client configuration (tests trust their own
	// server's certificate with it).
	TLS *tls.Config
}

// Client fetches URLs for one job under one Policy. Its connections are
// its own: nothing dialled for one job is reused by another.
type Client struct {
	policy    *Policy
	res       Resolver
	timeout   time.Duration
	transport *http.Transport
	http      *http.Client
}

// NewClient returns a Client for p. Close it when the job ends.
func NewClient(p *Policy, opts Options) *Client {
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	c := &Client{policy: p, res: opts.Resolver, timeout: opts.Timeout}
	c.transport = &http.Transport{
		Proxy:                  nil, // never an environment proxy: it would dial for us
		DialContext:            c.dial,
		TLSClientConfig:        opts.TLS, // every phase is bounded by Fetch's timeout
		MaxResponseHeaderBytes: abi.MaxHeaderBytes,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        30 * time.Second,
		ForceAttemptHTTP2:      opts.TLS == nil,
	}
	c.http = &http.Client{Transport: c.transport, CheckRedirect: c.checkRedirect}
	return c
}

// Close drops the client's idle connections.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// Fetch performs req and returns the response. Once the response's header
// has arrived, bodyLimit says how many body bytes the caller can take; a
// longer body is ErrTooLarge. Errors match ErrBlocked, ErrBadRequest,
// ErrTooLarge, ErrTimeout or ErrNetwork, or are ctx's cause. Their
// messages name hosts, never paths or queries.
func (c *Client) Fetch(ctx context.Context, req abi.Request, bodyLimit func(header []abi.Header) int) (abi.Response, error) {
	hreq, err := c.newRequest(ctx, req)
	if err != nil {
		return abi.Response{}, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, ErrTimeout)
	defer cancel()
	resp, err := c.http.Do(hreq.WithContext(ctx))
	if err != nil {
		return abi.Response{}, c.classify(ctx, hreq.URL.Hostname(), err)
	}
	defer resp.Body.Close()
	header := flatten(resp.Header)
	maxBody := bodyLimit(header)
	if maxBody < 0 {
		return abi.Response{}, fmt.Errorf("%w: the response header alone exceeds the buffer", ErrTooLarge)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxBody)+1))
	if err != nil {
		return abi.Response{}, c.classify(ctx, resp.Request.URL.Hostname(), err)
	}
	if len(body) > maxBody {
		return abi.Response{}, fmt.Errorf("%w: the response body is longer than the %d bytes the caller can take", ErrTooLarge, maxBody)
	}
	return abi.Response{Status: resp.StatusCode, Header: header, Body: body}, nil
}

// newRequest validates a guest's request and turns it into an http.Request.
func (c *Client) newRequest(ctx context.Context, req abi.Request) (*http.Request, error) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if !isToken(method) {
		return nil, fmt.Errorf("%w: method %q is not an HTTP method", ErrBadRequest, clip(method))
	}
	u, err := url.Parse(req.URL)
	if err != nil || !u.IsAbs() {
		return nil, fmt.Errorf("%w: the URL does not parse as an absolute http or https URL", ErrBadRequest)
	}
	if err := c.policy.CheckURL(u); err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadRequest, firstLine(err.Error()))
	}
	if len(req.Body) > 0 {
		body := slices.Clone(req.Body)
		hreq.ContentLength = int64(len(body))
		hreq.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(body))), nil }
		hreq.Body, _ = hreq.GetBody()
	}
	for _, h := range req.Header {
		if !isToken(h.Name) || strings.ContainsAny(h.Value, "\r\n\x00") {
			return nil, fmt.Errorf("%w: header %q is not a valid HTTP header field", ErrBadRequest, clip(h.Name))
		}
		switch http.CanonicalHeaderKey(h.Name) {
		case "Host", "Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Te", "Upgrade", "Trailer", "Content-Length":
			return nil, fmt.Errorf("%w: header %q is set by the host and may not be sent", ErrBadRequest, h.Name)
		}
		hreq.Header.Add(h.Name, h.Value)
	}
	return hreq, nil
}

// checkRedirect applies the policy to every hop.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: stopped after %d redirects", ErrNetwork, maxRedirects)
	}
	if err := c.policy.CheckURL(req.URL); err != nil {
		return &BlockedError{Reason: "redirect refused: " + err.Error()}
	}
	return nil
}

// dial resolves addr's host, checks every address, and connects to a
// checked address; the socket's own remote address is checked again just
// before connecting (Control), which no later DNS answer can change.
func (c *Client) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: bad address %q", ErrNetwork, clip(addr))
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: bad port %q", ErrNetwork, clip(portStr))
	}
	if err := c.policy.checkHost(host); err != nil {
		return nil, err
	}
	name := normaliseHost(host)
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(name); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if addrs, err = c.res.LookupNetIP(ctx, "ip", name); err != nil {
			return nil, fmt.Errorf("%w: cannot resolve host %q: %s", ErrNetwork, clip(name), firstLine(err.Error()))
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%w: host %q has no addresses", ErrNetwork, clip(name))
		}
	}
	for _, a := range addrs {
		if err := c.policy.CheckAddr(a); err != nil {
			return nil, &BlockedError{Reason: fmt.Sprintf("host %q resolves to a refused address: %s", clip(name), err)}
		}
	}
	d := net.Dialer{Control: c.control}
	var errs []error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		var be *BlockedError
		if errors.As(err, &be) {
			return nil, be
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%w: connecting to %q: %s", ErrNetwork, clip(name), firstLine(errors.Join(errs...).Error()))
}

// control checks the address a socket is about to connect to.
func (c *Client) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &BlockedError{Reason: fmt.Sprintf("unexpected socket address %q", clip(address))}
	}
	return c.policy.CheckAddr(ap.Addr())
}

// classify maps a transport error to one of the package's errors.
func (c *Client) classify(ctx context.Context, host string, err error) error {
	var be *BlockedError
	switch {
	case errors.As(err, &be):
		return be
	case context.Cause(ctx) == ErrTimeout:
		return fmt.Errorf("%w: fetching from %q took longer than %v (the worker's host call limit, palyra node start --host-call-timeout)", ErrTimeout, clip(host), c.timeout)
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case errors.Is(err, ErrNetwork), errors.Is(err, ErrBadRequest):
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err
		}
		return err
	}
	return fmt.Errorf("%w: %s: %s", ErrNetwork, clip(host), firstLine(unwrapURL(err).Error()))
}

// unwrapURL drops url.Error's prefix, which quotes the whole URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// flatten turns a response header into fields sorted by name, so the bytes
// a guest sees do not depend on map order.
func flatten(h http.Header) []abi.Header {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []abi.Header
	for _, k := range names {
		for _, v := range h[k] {
			out = append(out, abi.Header{Name: k, Value: v})
		}
	}
	return out
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
