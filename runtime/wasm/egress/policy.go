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

func normaliseAllowHost(h string) (string, error) {
	n := strings.ToLower(strings.TrimSpace(h))
	n = strings.TrimPrefix(n, "*.")
	n = strings.TrimSuffix(n, ".")
	n = strings.TrimSuffix(strings.TrimPrefix(n, "["), "]")
	if a, err := netip.ParseAddr(n); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("allow_hosts entry %q: IPv6 zones are not supported; give the address without %%zone", clip(h))
		}
		return a.Unmap().String(), nil
	}
	if n == "" || len(n) > 253 || strings.ContainsAny(n, "/:@?#*[]% \t\r\n") {
		return "", fmt.Errorf("allow_hosts entry %q is not a host name or IP address; give a bare host like example.com (no scheme, port or path)", clip(h))
	}
	return n, nil
}

// normaliseHost lowercases a URL host and strips brackets and a final dot.
func normaliseHost(h string) string {
	h = strings.ToLower(h)
	h = strings.TrimSuffix(h, ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return h
}

// hostAllowed reports whether a normalised host matches the allowlist: an
// exact match, or a subdomain of a name entry (never of an IP entry:
// "x.10.1.2.3" is a name that has nothing to do with 10.1.2.3).
func (p *Policy) hostAllowed(host string) bool {
	for _, h := range p.hosts {
		if host == h {
			return true
		}
		if _, err := netip.ParseAddr(h); err != nil && strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}

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
		if len(p.hosts) == 0 {
			return blocked("host %q is not allowed: the job has no allow_hosts, so no network", clip(host))
		}
		return blocked("host %q is not in the job's allow_hosts", clip(host))
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
		return blocked("address %s is %s; private targets need allow_private", a.Unmap(), why)
	}
	return nil
}

// extraPrivate lists ranges refused unless AllowPrivate, beyond what
// netip.Addr's predicates cover.
var extraPrivate = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `in "this network" (0.0.0.0/8)`},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT space"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment space"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking space"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (can reach private IPv4)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	{netip.MustParsePrefix("2002::/16"), "6to4 (can reach private IPv4)"},
	{netip.MustParsePrefix("100::/64"), "discard-only space"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (deprecated private)"},
}

// privateReason says why a is not a public unicast address, or "" if it is.
func privateReason(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case a.Zone() != "":
		return "zoned"
	}
	for _, p := range extraPrivate {
		if p.prefix.Contains(a) {
			return p.why
		}
	}
	return ""
}

// clip bounds a guest-supplied string quoted in an error message.
func clip(s string) string {
	if len(s) > 128 {
		return s[:128] + "…"
	}
	return s
}
