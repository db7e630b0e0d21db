package netguard

import (
	"net/netip"
	"testing"
)

func TestHostAllowed(t *testing.T) {
	entries := []string{}
	for _, e := range []string{"Example.COM.", "*.shop.example", "10.1.2.3", "[::ffff:192.0.2.1]"} {
		n, err := NormaliseAllowHost(e)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, n)
	}
	for host, want := range map[string]bool{
		"example.com": true, "api.example.com": true, "badexample.com": false,
		"a.shop.example": true, "10.1.2.3": true, "x.10.1.2.3": false, "192.0.2.1": true,
	} {
		if got := HostAllowed(entries, NormaliseHost(host)); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
	// An IP literal is matched only by that IP: never as a "subdomain" of
	// an entry, whatever the entry (entries built by hand, say a skill
	// record written before entries were checked).
	for _, e := range [][]string{{"8.8"}, {"0.0.1"}, {"1"}, {"example.com"}} {
		for _, ip := range []string{"1.1.8.8", "127.0.0.1", "10.0.0.1"} {
			if HostAllowed(e, ip) {
				t.Errorf("HostAllowed(%q, %q): an IP matched by suffix", e, ip)
			}
		}
	}
	for _, bad := range []string{"", "https://x.com", "x.com/path", "user@x.com", "x.com:80", "fe80::1%eth0",
		"8.8", "0.0.1", "1", "10.0.0", "host.123"} {
		if _, err := NormaliseAllowHost(bad); err == nil {
			t.Errorf("NormaliseAllowHost(%q) accepted", bad)
		}
	}
}

func TestPrivateReason(t *testing.T) {
	for addr, private := range map[string]bool{
		"8.8.8.8": false, "2606:4700::1": false, "127.0.0.1": true, "10.0.0.1": true, "169.254.1.1": true,
		"::1": true, "fe80::1": true, "100.64.0.1": true, "::ffff:10.0.0.1": true, "fec0::1": true,
		"64:ff9b::a00:1": true, "0.0.0.0": true, "224.0.0.1": true,
	} {
		if got := PrivateReason(netip.MustParseAddr(addr)) != ""; got != private {
			t.Errorf("PrivateReason(%s) private=%v, want %v", addr, got, private)
		}
	}
}
