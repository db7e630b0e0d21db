package pairing

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

// udp returns the address "host:port" as a QUIC listener reports it.
func udp(s string) net.Addr {
	return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s))
}

// allowN calls Allow n times and returns how many were allowed and the last
// retryAfter.
func allowN(l *Limiter, a net.Addr, n int) (allowed int, retry time.Duration) {
	for range n {
		ok, r := l.Allow(a)
		if ok {
			allowed++
		}
		retry = r
	}
	return allowed, retry
}

func TestLimiterPerSource(t *testing.T) {
	clk := newClock()
	l := NewLimiter(LimiterConfig{Now: clk.Now}) // defaults: 5 a minute, burst 5
	a, b := udp("192.0.2.1:4000"), udp("192.0.2.2:4000")

	if got, _ := allowN(l, a, 5); got != 5 {
		t.Fatalf("burst: %d of 5 allowed", got)
	}
	ok, retry := l.Allow(a)
	if ok || retry != 12*time.Second {
		t.Fatalf("6th attempt: ok=%v retryAfter=%s, want refused with 12s", ok, retry)
	}
	// Another port of the same address is the same source.
	if ok, _ := l.Allow(udp("192.0.2.1:4001")); ok {
		t.Fatal("same address, other port: allowed, want refused")
	}
	// Other sources are unaffected.
	if got, _ := allowN(l, b, 5); got != 5 {
		t.Fatalf("other source: %d of 5 allowed", got)
	}
	// Refused attempts took nothing: after retryAfter exactly one more.
	clk.Advance(12 * time.Second)
	if got, _ := allowN(l, a, 2); got != 1 {
		t.Fatalf("after 12s: %d allowed, want 1", got)
	}
}

func TestLimiterIPv6Prefix(t *testing.T) {
	clk := newClock()
	l := NewLimiter(LimiterConfig{Now: clk.Now})
	if got, _ := allowN(l, udp("[2001:db8:1:2::1]:7444"), 5); got != 5 {
		t.Fatalf("burst: %d of 5", got)
	}
	if ok, _ := l.Allow(udp("[2001:db8:1:2:ffff::9]:7444")); ok {
		t.Fatal("same /64: allowed, want refused")
	}
	if ok, _ := l.Allow(udp("[2001:db8:1:3::1]:7444")); !ok {
		t.Fatal("other /64: refused, want allowed")
	}
	// An IPv4-mapped IPv6 address is the IPv4 source.
	if got, _ := allowN(l, udp("192.0.2.7:1"), 5); got != 5 {
		t.Fatalf("IPv4 burst: %d of 5", got)
	}
	if ok, _ := l.Allow(&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 2}); ok {
		t.Fatal("IPv4-mapped form of an exhausted source: allowed, want refused")
	}
}

func TestLimiterGlobal(t *testing.T) {
	clk := newClock()
	l := NewLimiter(LimiterConfig{Now: clk.Now, GlobalBurst: 3, Global: rate.Every(10 * time.Second)})
	for i := range 3 {
		if ok, _ := l.Allow(udp(fmt.Sprintf("198.51.100.%d:1", i))); !ok {
			t.Fatalf("source %d: refused within the global burst", i)
		}
	}
	late := udp("198.51.100.200:1")
	ok, retry := l.Allow(late)
	if ok || retry != 10*time.Second {
		t.Fatalf("4th source: ok=%v retryAfter=%s, want refused with 10s", ok, retry)
	}
	// The global refusal did not use up the late source's own bucket.
	clk.Advance(50 * time.Second)
	if got, _ := allowN(l, late, 5); got != 3 {
		t.Fatalf("after the global bucket refilled: %d allowed, want 3 (the global burst)", got)
	}
	clk.Advance(time.Hour)
	if got, _ := allowN(l, late, 6); got != 3 {
		t.Fatalf("a fresh hour: %d allowed, want 3", got)
	}
}

func TestLimiterMemoryBounded(t *testing.T) {
	clk := newClock()
	l := NewLimiter(LimiterConfig{Now: clk.Now, MaxSources: 8, Global: rate.Inf})
	for i := range 1000 {
		l.Allow(udp(fmt.Sprintf("10.%d.%d.1:1", i/256, i%256)))
		if n := l.Sources(); n > 8 {
			t.Fatalf("after %d sources the limiter remembers %d, want at most 8", i+1, n)
		}
	}
	// Idle sources (refilled: 5 tokens at 5 a minute = 1 minute) are forgotten.
	clk.Advance(time.Minute)
	l.Allow(udp("203.0.113.9:1"))
	if n := l.Sources(); n != 1 {
		t.Fatalf("after a minute idle: %d sources remembered, want 1", n)
	}
}

func TestLimiterOddAddresses(t *testing.T) {
	clk := newClock()
	l := NewLimiter(LimiterConfig{Now: clk.Now})
	// Unreadable addresses share one bucket and never panic.
	odd := []net.Addr{nil, (*net.UDPAddr)(nil), (*net.TCPAddr)(nil), &net.UnixAddr{Name: "/x", Net: "unix"}, &net.UDPAddr{}}
	allowed := 0
	for _, a := range odd {
		if ok, _ := l.Allow(a); ok {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d of 5 unreadable addresses allowed, want 5 (one shared burst)", allowed)
	}
	if ok, _ := l.Allow(nil); ok {
		t.Fatal("6th unreadable address allowed; they must share one bucket")
	}
	// A net.Addr of another type is read from its String.
	if ok, _ := l.Allow(&net.IPAddr{IP: net.ParseIP("192.0.2.50")}); !ok {
		t.Fatal("IPAddr source refused, want its own bucket")
	}
}

func TestLimiterConcurrent(t *testing.T) {
	l := NewLimiter(LimiterConfig{MaxSources: 16, Now: newClock().Now}) // time stands still
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if ok, _ := l.Allow(udp(fmt.Sprintf("10.0.%d.%d:1", g, i%4))); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// 32 sources with 5 each, but the global burst is 20.
	if allowed != 20 {
		t.Fatalf("%d attempts allowed, want the global burst of 20", allowed)
	}
}
