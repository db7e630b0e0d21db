// Package netguard holds the network rules every executor enforces on a
// job's egress, in one place so they cannot drift apart: how an allowlist
// entry and a URL host are normalised, when a host matches an entry, and
// which addresses count as non-public (refused unless a job is granted
// private targets). The wasm egress client and the browser executor both
// use it; each keeps only its own transport (an HTTP client, a proxy).
package netguard

import (
	"fmt"
	"net/netip"
	"strings"
)

// NormaliseAllowHost turns an allowlist entry into its canonical form: a
// lower-case host name without a final dot (a leading "*." is accepted and
// ignored: subdomains are always admitted) or an unmapped IP literal.
func NormaliseAllowHost(h string) (string, error) {
	n := strings.ToLower(strings.TrimSpace(h))
	n = strings.TrimPrefix(n, "*.")
	n = strings.TrimSuffix(n, ".")
	n = strings.TrimSuffix(strings.TrimPrefix(n, "["), "]")
	if a, err := netip.ParseAddr(n); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("--allow-host %q: IPv6 zones are not supported; give the address without %%zone", clip(h))
		}
		return a.Unmap().String(), nil
	}
	if n == "" || len(n) > 253 || strings.ContainsAny(n, "/:@?#*[]% \t\r\n") {
		return "", fmt.Errorf("--allow-host %q is not a host name or IP address; give a bare host like example.com (no scheme, port or path)", clip(h))
	}
	if last := n[strings.LastIndexByte(n, '.')+1:]; strings.Trim(last, "0123456789") == "" {
		// No top-level domain is all digits: this is a partial IP address
		// ("8.8", "10.0.0"), which would otherwise read as a domain suffix.
		return "", fmt.Errorf("--allow-host %q is neither a whole IP address nor a host name; give the whole address (e.g. 10.0.0.5) or a name like example.com", clip(h))
	}
	return n, nil
}

// NormaliseHost lowercases a URL host, strips brackets and a final dot, and
// unmaps IPv4-in-IPv6 literals.
func NormaliseHost(h string) string {
	h = strings.ToLower(h)
	h = strings.TrimSuffix(h, ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return h
}

// HostAllowed reports whether a normalised host matches one of the
// normalised entries: exactly, or as a subdomain of a name entry — never of
// an IP entry ("x.10.1.2.3" is a name that has nothing to do with 10.1.2.3),
// and an IP host never as a subdomain of anything ("1.1.8.8" is not under
// "8.8").
func HostAllowed(entries []string, host string) bool {
	_, err := netip.ParseAddr(host)
	hostIsIP := err == nil
	for _, h := range entries {
		if host == h {
			return true
		}
		if hostIsIP {
			continue // an IP is allowed by that IP only, never by a suffix
		}
		if _, err := netip.ParseAddr(h); err != nil && strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}

// extraPrivate lists ranges refused unless private targets are granted,
// beyond what netip.Addr's predicates cover.
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

// PrivateReason says why a is not a public unicast address, or "" if it is.
func PrivateReason(a netip.Addr) string {
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

func clip(s string) string {
	if len(s) > 128 {
		return s[:128] + "…"
	}
	return s
}
