package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/runtime/wasm/abi"
)

type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func anyBody(int) func([]abi.Header) int { return func([]abi.Header) int { return 1 << 20 } }

func TestNewPolicyRefusesBadEntries(t *testing.T) {
	for _, h := range []string{"https://example.com", "example.com/path", "example.com:443", "", "fe80::1%eth0", "a b"} {
		if _, err := NewPolicy([]string{h}, false); err == nil || !strings.Contains(err.Error(), "--allow-host") {
			t.Errorf("NewPolicy(%q) = %v, want an allow_hosts entry error", h, err)
		}
	}
	if _, err := NewPolicy([]string{"*.Example.COM.", "[::1]", "10.0.0.1"}, false); err != nil {
		t.Errorf("NewPolicy of valid entries: %v", err)
	}
}

func TestCheckURL(t *testing.T) {
	p, err := NewPolicy([]string{"*.Example.com", "10.1.2.3", "[2001:db8::1]"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string]string{
		"https://example.com/x":        "",
		"https://API.example.com./x":   "",
		"http://a.b.example.com:8080/": "",
		"https://badexample.com/":      `host "badexample.com" is not in the job's --allow-host list`,
		"https://example.com.evil.io/": `host "example.com.evil.io" is not in the job's --allow-host list`,
		"ftp://example.com/":           `scheme "ftp" is not allowed`,
		"https://10.1.2.3/":            "address 10.1.2.3 is private; private targets need --allow-private",
		"https://[2001:db8::1]/":       "",
		"https://1.2.3.4/":             `host "1.2.3.4" is not in the job's --allow-host list`,
		"https://x.10.1.2.3/":          `is not in the job's --allow-host list`,
	} {
		u, _ := url.Parse(raw)
		err := p.CheckURL(u)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckURL(%s) = %v, want allowed", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrBlocked)):
			t.Errorf("CheckURL(%s) = %v, want a BlockedError containing %q", raw, err, want)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	strict, _ := NewPolicy(nil, false)
	lax, _ := NewPolicy(nil, true)
	for _, tc := range []struct{ addr, why string }{
		{"127.0.0.1", "loopback"}, {"::1", "loopback"}, {"10.0.0.1", "private"}, {"192.168.1.1", "private"},
		{"172.16.0.1", "private"}, {"fd00::1", "private"}, {"169.254.169.254", "link-local"}, {"fe80::1", "link-local"},
		{"0.0.0.0", "unspecified"}, {"::", "unspecified"}, {"224.0.0.1", "multicast"}, {"ff02::1", "multicast"},
		{"100.64.0.1", "carrier-grade NAT"}, {"::ffff:127.0.0.1", "loopback"}, {"64:ff9b::a00:1", "NAT64"},
		{"255.255.255.255", "broadcast"}, {"8.8.8.8", ""}, {"2606:4700::1111", ""},
	} {
		a := netip.MustParseAddr(tc.addr)
		err := strict.CheckAddr(a)
		if tc.why == "" {
			if err != nil {
				t.Errorf("CheckAddr(%s) = %v, want allowed", tc.addr, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("CheckAddr(%s) = %v, want refused as %s", tc.addr, err, tc.why)
		}
		if err := lax.CheckAddr(a); err != nil {
			t.Errorf("with allow_private, CheckAddr(%s) = %v", tc.addr, err)
		}
	}
}

// TestControlRechecksSocketAddress covers the last line of defence: the
// address a socket actually connects to is checked, whatever DNS said.
func TestControlRechecksSocketAddress(t *testing.T) {
	p, _ := NewPolicy([]string{"example.com"}, false)
	c := NewClient(p, Options{})
	if err := c.control("tcp4", "127.0.0.1:80", nil); !errors.Is(err, ErrBlocked) {
		t.Errorf("control(127.0.0.1) = %v, want blocked", err)
	}
	if err := c.control("tcp6", "[::ffff:10.0.0.1]:443", nil); !errors.Is(err, ErrBlocked) {
		t.Errorf("control(mapped 10.0.0.1) = %v, want blocked", err)
	}
	if err := c.control("tcp4", "93.184.215.14:443", nil); err != nil {
		t.Errorf("control(public) = %v", err)
	}
}

func newSite(t *testing.T, tls bool) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/echo":
			w.Header().Set("X-Method", r.Method)
			w.Header().Add("X-Multi", "b")
			w.Header().Add("X-Multi", "a")
			fmt.Fprintf(w, "%s %s %s", r.Header.Get("X-Test"), r.Header.Get("Content-Length"), readAll(r))
		default:
			w.Write([]byte(strings.Repeat("x", 1000)))
		}
	})
	s := httptest.NewUnstartedServer(h)
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s, &hits
}

func readAll(r *http.Request) string {
	var b strings.Builder
	buf := make([]byte, 512)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

func TestFetch(t *testing.T) {
	site, _ := newSite(t, false)
	p, _ := NewPolicy([]string{"127.0.0.1"}, true)
	c := NewClient(p, Options{})
	defer c.Close()
	resp, err := c.Fetch(context.Background(), abi.Request{
		Method: "POST", URL: site.URL + "/echo",
		Header: []abi.Header{{Name: "X-Test", Value: "yes"}}, Body: []byte("payload"),
	}, anyBody(0))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || string(resp.Body) != "yes 7 payload" {
		t.Errorf("response %d %q", resp.Status, resp.Body)
	}
	var multi []string
	for _, h := range resp.Header {
		if h.Name == "X-Multi" {
			multi = append(multi, h.Value)
		}
	}
	if strings.Join(multi, ",") != "b,a" {
		t.Errorf("X-Multi values %v, want [b a] in order", multi)
	}
	for i := 1; i < len(resp.Header); i++ {
		if resp.Header[i-1].Name > resp.Header[i].Name {
			t.Errorf("headers not sorted by name: %v", resp.Header)
		}
	}
}

func TestFetchTLS(t *testing.T) {
	site, _ := newSite(t, true)
	p, _ := NewPolicy([]string{"127.0.0.1"}, true)
	// The test server's certificate is for 127.0.0.1; trust it explicitly.
	c := NewClient(p, Options{TLS: site.Client().Transport.(*http.Transport).TLSClientConfig})
	defer c.Close()
	resp, err := c.Fetch(context.Background(), abi.Request{URL: site.URL + "/"}, anyBody(0))
	if err != nil || resp.Status != 200 || len(resp.Body) != 1000 {
		t.Fatalf("TLS fetch: %v %+v", err, resp.Status)
	}
	// Without trusting it the handshake fails as a network error.
	plain := NewClient(p, Options{})
	defer plain.Close()
	if _, err := plain.Fetch(context.Background(), abi.Request{URL: site.URL + "/"}, anyBody(0)); !errors.Is(err, ErrNetwork) {
		t.Errorf("untrusted TLS fetch = %v, want ErrNetwork", err)
	}
}

func TestFetchRefusals(t *testing.T) {
	site, hits := newSite(t, false)
	port := site.URL[strings.LastIndexByte(site.URL, ':')+1:]
	p, _ := NewPolicy([]string{"127.0.0.1", "svc.test"}, true)
	c := NewClient(p, Options{Resolver: fakeResolver{"svc.test": {netip.MustParseAddr("127.0.0.1")}}, Timeout: 5 * time.Second})
	defer c.Close()
	for _, tc := range []struct {
		name string
		req  abi.Request
		max  int
		want error
		msg  string
	}{
		{"body over the limit", abi.Request{URL: site.URL + "/"}, 999, ErrTooLarge, "longer than the 999 bytes"},
		{"body at the limit", abi.Request{URL: site.URL + "/"}, 1000, nil, ""},
		{"redirect loop", abi.Request{URL: site.URL + "/loop"}, 1 << 20, ErrNetwork, "stopped after 10 redirects"},
		{"host header", abi.Request{URL: site.URL + "/", Header: []abi.Header{{Name: "host", Value: "internal"}}}, 1 << 20, ErrBadRequest, `header "host" is set by the host`},
		{"bad header value", abi.Request{URL: site.URL + "/", Header: []abi.Header{{Name: "X", Value: "a\r\nEvil: 1"}}}, 1 << 20, ErrBadRequest, "not a valid HTTP header"},
		{"bad method", abi.Request{Method: "GET /", URL: site.URL + "/"}, 1 << 20, ErrBadRequest, "is not an HTTP method"},
		{"relative URL", abi.Request{URL: "/etc/passwd"}, 1 << 20, ErrBadRequest, "absolute"},
		{"unresolvable", abi.Request{URL: "http://nx.svc.test:" + port + "/"}, 1 << 20, ErrNetwork, `cannot resolve host "nx.svc.test"`},
		{"resolved name dials the checked address", abi.Request{URL: "http://svc.test:" + port + "/"}, 1 << 20, nil, ""},
	} {
		_, err := c.Fetch(context.Background(), tc.req, func([]abi.Header) int { return tc.max })
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want %v containing %q", tc.name, err, tc.want, tc.msg)
		}
		if strings.Contains(err.Error(), "/loop") || strings.Contains(err.Error(), "passwd") {
			t.Errorf("%s: error %q quotes a URL path", tc.name, err)
		}
	}
	if hits.Load() == 0 {
		t.Error("the server saw no request at all")
	}
}

// A skill tool's run has no --allow-host flag: its refusals name where its
// grants come from instead.
func TestRefusalsNameWhereTheGrantsComeFrom(t *testing.T) {
	none, _ := NewPolicy(nil, false)
	some, _ := NewPolicy([]string{"example.com", "10.1.2.3"}, false)
	from := "the capabilities of acme.web/get (its skill's manifest)"
	for _, c := range []struct {
		p    *Policy
		raw  string
		want string
	}{
		{none.From(from), "https://example.org/", `host "example.org" is not allowed: ` + from + " grant no hosts, so no network"},
		{some.From(from), "https://example.org/", `host "example.org" is not among the hosts ` + from + " grant"},
		{some.From(from), "https://10.1.2.3/", "private targets need allow_private in " + from},
	} {
		u, _ := url.Parse(c.raw)
		if err := c.p.CheckURL(u); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "--allow") {
			t.Errorf("CheckURL(%s) = %v, want %q and no flag", c.raw, err, c.want)
		}
	}
}
