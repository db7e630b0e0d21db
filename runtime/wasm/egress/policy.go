// Package egress is the HTTP client wasm jobs reach the network through.
//
// A job may reach only the hosts its Spec.AllowHosts lists ("example.com"
// admits that host and its subdomains; an IP literal is matched exactly),
// only over http and https, and — unless Spec.AllowPrivate — only public
// unicast addresses. The address check runs after DNS resolution, on the
// very addresses the client then connects to, and again on the connected
// socket's remote address, so a name that re-resolves to a private address
// between check and connect (DNS rebinding) is still refused. Every
// redirect hop passes the same checks.
package egress

import (
	"errors"
	"fmt"
	"github.com/palyra-mesh/palyra/runtime/netguard"
	"net/netip"
	"net/url"
	"strings"
)

// ErrBlocked marks a request the job's grants do not allow; *BlockedError
// matches it.
var ErrBlocked = errors.New("blocked by the job's network grants")

// BlockedError says why a request was refused. Its message names the host
// or address, never a URL's path or query (which may carry tokens).
type BlockedError struct{ Reason string }

func (e *BlockedError) Error() string { return e.Reason }

// Is makes errors.Is(err, ErrBlocked) hold.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

func blocked(format string, args ...any) error {
	return &BlockedError{Reason: fmt.Sprintf(format, args...)}
}

// Policy decides which URLs and addresses one job may reach.
type Policy struct {
	hosts        []string // normalised AllowHosts entries
	allowPrivate bool
	from         string // where the grants come from, for errors ("": the job's flags)
}

// From names where the allowlist came from, for refusals: a skill tool's
// run has no --allow-host flag to point at (its manifest's capabilities
// decide), and naming one sent users looking for a flag that does not
// exist.
func (p *Policy) From(src string) *Policy {
	p.from = src
	return p
}

// NewPolicy normalises an allowlist. An entry is a host name (a leading
// "*." is accepted and ignored: subdomains are always admitted) or an IP
// literal. An empty list allows nothing.
func NewPolicy(allowHosts []string, allowPrivate bool) (*Policy, error) {
	p := &Policy{allowPrivate: allowPrivate}
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

func (p *Policy) hostAllowed(host string) bool { return netguard.HostAllowed(p.hosts, host) }

// CheckURL refuses a URL whose scheme is not http or https or whose host is
// not allowed; an IP-literal host is also checked as an address.
func (p *Policy) CheckURL(u *url.URL) error {
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	default:
		return blocked("scheme %q is not allowed; only http and https", clip(u.Scheme))
	}
	return p.checkHost(u.Hostname())
}

func (p *Policy) checkHost(raw string) error {
	host := normaliseHost(raw)
	if host == "" {
		return blocked("URL has no host")
	}
	if !p.hostAllowed(host) {
		switch {
		case p.from != "" && len(p.hosts) == 0:
			return blocked("host %q is not allowed: %s grant no hosts, so no network", clip(host), p.from)
		case p.from != "":
			return blocked("host %q is not among the hosts %s grant", clip(host), p.from)
		case len(p.hosts) == 0:
			return blocked("host %q is not allowed: the job has no --allow-host, so no network", clip(host))
		}
		return blocked("host %q is not in the job's --allow-host list", clip(host))
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(a)
	}
	return nil
}

// CheckAddr refuses a non-public address unless private targets are allowed.
func (p *Policy) CheckAddr(a netip.Addr) error {
	if p.allowPrivate {
		return nil
	}
	if why := privateReason(a); why != "" {
		if p.from != "" {
			return blocked("address %s is %s; private targets need allow_private in %s", a.Unmap(), why, p.from)
		}
		return blocked("address %s is %s; private targets need --allow-private", a.Unmap(), why)
	}
	return nil
}

// privateReason says why a is not a public unicast address, or "" if it is.
func privateReason(a netip.Addr) string { return netguard.PrivateReason(a) }

func clip(s string) string {
	if len(s) > 128 {
		return s[:128] + "…"
	}
	return s
}
