package browser

import (
	"context"
	"errors"
	"fmt"
	"github.com/palyra-mesh/palyra/runtime/netguard"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// lookupTimeout bounds one DNS resolution made for a policy check.
const lookupTimeout = 5 * time.Second

// BlockedError says why a request was refused by a job's network policy.
type BlockedError struct {
	URL    string
	Reason string
	cause  error // what the reason says, when it is an error (a name that does not resolve)
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("request to %s blocked: %s", truncate(e.URL, 256), e.Reason)
}

func (e *BlockedError) Unwrap() error { return e.cause }

// resolver is the part of *net.Resolver the policy uses; tests replace it.
type resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// policy decides which URLs one job may reach. It caches DNS answers for the
// job's lifetime so that the Fetch-domain check and the egress proxy's dial
// see the same addresses: the proxy connects only to addresses that passed
// the check (see DESIGN.md on DNS rebinding).
type policy struct {
	hosts        []string // normalised AllowHosts
	allowPrivate bool
	res          resolver
	owner        string // "job" or "session", for messages

	mu    sync.Mutex
	cache map[string]*lookup
}

type lookup struct {
	done  chan struct{}
	addrs []netip.Addr
	err   error
}

// newPolicy normalises the allowlist. An entry is a host name ("example.com",
// which also admits its subdomains; a leading "*." is accepted and ignored)
// or an IP literal, matched exactly.
func newPolicy(allowHosts []string, allowPrivate bool, res resolver) (*policy, error) {
	p := &policy{allowPrivate: allowPrivate, res: res, owner: "job", cache: map[string]*lookup{}}
	for _, h := range allowHosts {
		n, err := normaliseAllowHost(h)
		if err != nil {
			return nil, err
		}
		p.hosts = append(p.hosts, n)
	}
	return p, nil
}

func normaliseAllowHost(h string) (string, error) { return netguard.NormaliseAllowHost(h) }

func normaliseHost(h string) string { return netguard.NormaliseHost(h) }

// hostAllowed reports whether host (normalised) matches the allowlist.
func (p *policy) hostAllowed(host string) bool { return netguard.HostAllowed(p.hosts, host) }

func parseIP(host string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// checkURL decides whether a request to raw may proceed. data:, blob: and
// about: URLs never touch the network and are allowed; http and https need
// an allowed host whose addresses pass checkHost. Everything else is
// refused.
func (p *policy) checkURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return &BlockedError{URL: raw, Reason: "URL does not parse"}
	}
	switch strings.ToLower(u.Scheme) {
	case "data", "blob", "about":
		return nil
	case "http", "https", "ws", "wss":
	default:
		return &BlockedError{URL: raw, Reason: fmt.Sprintf("scheme %q is not allowed (only http and https)", u.Scheme)}
	}
	if _, err := p.checkHost(ctx, u.Hostname()); err != nil {
		return &BlockedError{URL: raw, Reason: err.Error(), cause: err}
	}
	return nil
}

// checkHost applies the allowlist and, unless private targets are allowed,
// the address check. It returns the addresses the host resolved to (nil
// when no resolution was needed: an IP literal, or AllowPrivate).
func (p *policy) checkHost(ctx context.Context, rawHost string) ([]netip.Addr, error) {
	host := normaliseHost(rawHost)
	if host == "" {
		return nil, errors.New("URL has no host")
	}
	if !p.hostAllowed(host) {
		if len(p.hosts) == 0 {
			return nil, fmt.Errorf("host %q is not allowed: the %s has no --allow-host, so no network", truncate(host, 128), p.owner)
		}
		return nil, fmt.Errorf("host %q is not in the %s's --allow-host list", truncate(host, 128), p.owner)
	}
	if ip, ok := parseIP(host); ok {
		if !p.allowPrivate {
			if why := privateReason(ip); why != "" {
				return nil, fmt.Errorf("address %s is %s; private targets need --allow-private", ip, why)
			}
		}
		return []netip.Addr{ip}, nil
	}
	if p.allowPrivate {
		return nil, nil
	}
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if why := privateReason(a); why != "" {
			return nil, fmt.Errorf("host %q resolves to %s, which is %s; private targets need --allow-private", truncate(host, 128), a, why)
		}
	}
	return addrs, nil
}

// resolve looks host up once per job; concurrent callers share the answer.
func (p *policy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	p.mu.Lock()
	l, ok := p.cache[host]
	if !ok {
		l = &lookup{done: make(chan struct{})}
		p.cache[host] = l
		p.mu.Unlock()
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
		addrs, err := p.res.LookupNetIP(lctx, "ip", host)
		cancel()
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		for i := range addrs {
			addrs[i] = addrs[i].Unmap()
		}
		if err != nil {
			err = &resolveError{fmt.Errorf("cannot resolve host %q: %w", truncate(host, 128), err)}
		}
		l.addrs, l.err = addrs, err
		close(l.done)
		return addrs, err
	}
	p.mu.Unlock()
	select {
	case <-l.done:
		return l.addrs, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// resolveError is a host name that does not resolve: the page is
// unreachable, not refused by the policy.
type resolveError struct{ err error }

func (e *resolveError) Error() string { return e.err.Error() }
func (e *resolveError) Unwrap() error { return e.err }

// privateReason says why a is not a public unicast address, or "" if it is.
func privateReason(a netip.Addr) string { return netguard.PrivateReason(a) }

// defaultResolver is the system resolver.
var defaultResolver resolver = net.DefaultResolver
