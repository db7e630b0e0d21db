package browser

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeResolver answers from a table and counts lookups.
type fakeResolver struct {
	answers map[string][]string
	calls   atomic.Int64
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.calls.Add(1)
	ips, ok := f.answers[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, s := range ips {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func TestPolicyHosts(t *testing.T) {
	res := &fakeResolver{answers: map[string][]string{
		"example.com":       {"93.184.215.14"},
		"api.example.com":   {"93.184.215.15", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"internal.example":  {"10.1.2.3"},
		"mixed.example":     {"93.184.215.14", "192.168.1.1"},
		"mapped.example":    {"::ffff:127.0.0.1"},
		"metadata.example":  {"169.254.169.254"},
		"evilexample.com":   {"93.184.215.16"},
		"nat64.example":     {"64:ff9b::a00:1"},
		"cgnat.example":     {"100.64.0.1"},
		"multicast.example": {"224.0.0.1"},
	}}
	p, err := newPolicy([]string{"Example.COM.", "internal.example", "mixed.example", "mapped.example",
		"metadata.example", "nat64.example", "cgnat.example", "multicast.example", "8.8.8.8", "[::1]", "10.0.0.1"}, false, res)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		url  string
		want string // "" = allowed, else a fragment of the reason
	}{
		{"https://example.com/", ""},
		{"http://api.example.com:8080/x?y", ""},
		{"https://EXAMPLE.com./", ""},
		{"https://evilexample.com/", "not in the job's --allow-host list"},
		{"https://example.com.evil.net/", "not in the job's --allow-host list"},
		{"https://internal.example/", "private"},
		{"https://mixed.example/", "192.168.1.1"},
		{"https://mapped.example/", "loopback"},
		{"https://metadata.example/", "link-local"},
		{"https://nat64.example/", "NAT64"},
		{"https://cgnat.example/", "carrier-grade"},
		{"https://multicast.example/", "multicast"},
		{"http://8.8.8.8/", ""},
		{"http://8.8.8.9/", "not in the job's --allow-host list"},
		{"http://[::1]:80/", "loopback"},
		{"http://10.0.0.1/", "private"},
		{"ftp://example.com/", "scheme"},
		{"file:///etc/passwd", "scheme"},
		{"chrome://settings", "scheme"},
		{"data:text/plain,hi", ""},
		{"blob:https://example.com/uuid", ""},
		{"about:blank", ""},
		{"http:///nohost", "no host"},
	}
	for _, c := range cases {
		err := p.checkURL(context.Background(), c.url)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: blocked (%v), want allowed", c.url, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: allowed, want blocked (%s)", c.url, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %v, want a reason containing %q", c.url, err, c.want)
		}
	}
	before := res.calls.Load()
	for range 3 {
		_ = p.checkURL(context.Background(), "https://example.com/again")
	}
	if res.calls.Load() != before {
		t.Errorf("example.com was resolved again; a job must reuse its first answer (the proxy dials what was checked)")
	}
}

func TestPolicyAllowPrivateSkipsResolution(t *testing.T) {
	res := &fakeResolver{}
	p, err := newPolicy([]string{"localhost", "127.0.0.1"}, true, res)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"http://localhost:1234/", "http://127.0.0.1/", "http://a.localhost/"} {
		if err := p.checkURL(context.Background(), u); err != nil {
			t.Errorf("%s: %v, want allowed with AllowPrivate", u, err)
		}
	}
	if err := p.checkURL(context.Background(), "http://127.0.0.2/"); err == nil {
		t.Errorf("127.0.0.2 allowed, but only 127.0.0.1 is granted")
	}
	if res.calls.Load() != 0 {
		t.Errorf("resolver called %d times; AllowPrivate needs no DNS", res.calls.Load())
	}
}

func TestPolicyNoHostsMeansNoNetwork(t *testing.T) {
	p, err := newPolicy(nil, true, &fakeResolver{})
	if err != nil {
		t.Fatal(err)
	}
	err = p.checkURL(context.Background(), "http://127.0.0.1/")
	if err == nil || !strings.Contains(err.Error(), "no --allow-host") {
		t.Fatalf("got %v, want a refusal saying the job has no --allow-host", err)
	}
	if err := p.checkURL(context.Background(), "data:text/html,<p>hi"); err != nil {
		t.Fatalf("data: URL refused: %v", err)
	}
}

func TestBadAllowHosts(t *testing.T) {
	for _, h := range []string{"", "https://example.com", "example.com:443", "example.com/path", "a b", "fe80::1%eth0"} {
		if _, err := newPolicy([]string{h}, false, &fakeResolver{}); err == nil {
			t.Errorf("--allow-host %q accepted, want an error", h)
		}
	}
	if _, err := newPolicy([]string{"*.example.com", "[2001:db8::1]", "EXAMPLE.org."}, false, &fakeResolver{}); err != nil {
		t.Errorf("valid entries refused: %v", err)
	}
}

func TestPrivateReason(t *testing.T) {
	for ip, private := range map[string]bool{
		"0.0.0.0": true, "127.0.0.1": true, "10.0.0.1": true, "172.16.0.1": true, "192.168.0.1": true,
		"169.254.169.254": true, "224.0.0.1": true, "255.255.255.255": true, "100.64.1.1": true,
		"::": true, "::1": true, "fe80::1": true, "fc00::1": true, "ff02::1": true, "::ffff:10.0.0.1": true,
		"2002:a00:1::": true, "1.1.1.1": false, "93.184.215.14": false, "2606:4700::1111": false,
	} {
		if got := privateReason(netip.MustParseAddr(ip)) != ""; got != private {
			t.Errorf("%s: private=%v, want %v", ip, got, private)
		}
	}
}
