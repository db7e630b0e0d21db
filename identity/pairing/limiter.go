package pairing

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// LimiterConfig sets a Limiter's rates. Zero fields take the defaults.
type LimiterConfig struct {
	PerSource      rate.Limit       // attempts per second per source; default 5 a minute
	PerSourceBurst int              // default 5
	Global         rate.Limit       // attempts per second in all; default 60 a minute
	GlobalBurst    int              // default 20
	MaxSources     int              // sources remembered at once; default 4096
	Now            func() time.Time // clock; default time.Now (tests inject one)
}

// Limiter guards the pairing endpoint against online guessing: a token
// bucket per source (an IPv4 address or an IPv6 /64) and one for everyone.
// It remembers at most MaxSources sources, forgetting idle ones first and
// the least recently seen when full; a forgotten source starts with a full
// bucket, which the global bucket still caps. It is safe for concurrent use.
type Limiter struct {
	cfg LimiterConfig

	mu      sync.Mutex
	global  *rate.Limiter
	sources map[netip.Prefix]*list.Element // of *source
	lru     *list.List                     // front = most recently seen
}

type source struct {
	key  netip.Prefix
	lim  *rate.Limiter
	seen time.Time
}

// NewLimiter returns a Limiter with cfg's rates.
func NewLimiter(cfg LimiterConfig) *Limiter {
	if cfg.PerSource <= 0 {
		cfg.PerSource = rate.Every(time.Minute / 5)
	}
	if cfg.PerSourceBurst <= 0 {
		cfg.PerSourceBurst = 5
	}
	if cfg.Global <= 0 {
		cfg.Global = rate.Every(time.Minute / 60)
	}
	if cfg.GlobalBurst <= 0 {
		cfg.GlobalBurst = 20
	}
	if cfg.MaxSources <= 0 {
		cfg.MaxSources = 4096
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Limiter{
		cfg:     cfg,
		global:  rate.NewLimiter(cfg.Global, cfg.GlobalBurst),
		sources: make(map[netip.Prefix]*list.Element),
		lru:     list.New(),
	}
}

// Allow takes one attempt from remote's bucket and the global one. When
// either is empty it takes nothing and says how long until an attempt would
// be allowed, for a "try again in" reply.
func (l *Limiter) Allow(remote net.Addr) (ok bool, retryAfter time.Duration) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	src := l.source(sourceKey(remote), now)
	own := src.lim.ReserveN(now, 1)
	if d := own.DelayFrom(now); d > 0 {
		own.CancelAt(now)
		return false, d
	}
	all := l.global.ReserveN(now, 1)
	if d := all.DelayFrom(now); d > 0 {
		all.CancelAt(now)
		own.CancelAt(now) // a crowd must not use up an innocent source's bucket
		return false, d
	}
	return true, 0
}

// Sources returns how many sources the limiter remembers.
func (l *Limiter) Sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sources)
}

// source returns key's entry, marked as seen now, after forgetting sources
// idle long enough to have refilled (forgetting them changes nothing) and,
// if still full, the least recently seen one.
func (l *Limiter) source(key netip.Prefix, now time.Time) *source {
	if el, ok := l.sources[key]; ok {
		s := el.Value.(*source)
		s.seen = now
		l.lru.MoveToFront(el)
		return s
	}
	refill := time.Duration(float64(l.cfg.PerSourceBurst) / float64(l.cfg.PerSource) * float64(time.Second))
	for el := l.lru.Back(); el != nil; el = l.lru.Back() {
		s := el.Value.(*source)
		if len(l.sources) < l.cfg.MaxSources && now.Sub(s.seen) < refill {
			break
		}
		l.lru.Remove(el)
		delete(l.sources, s.key)
	}
	s := &source{key: key, lim: rate.NewLimiter(l.cfg.PerSource, l.cfg.PerSourceBurst), seen: now}
	l.sources[key] = l.lru.PushFront(s)
	return s
}

// sourceKey names the bucket of a remote address: the IPv4 address, or the
// IPv6 /64 (one subscriber's usual allocation). Addresses that cannot be
// read share the zero key.
func sourceKey(remote net.Addr) netip.Prefix {
	var addr netip.Addr
	switch a := remote.(type) {
	case *net.UDPAddr:
		if a != nil {
			addr = a.AddrPort().Addr()
		}
	case *net.TCPAddr:
		if a != nil {
			addr = a.AddrPort().Addr()
		}
	case nil:
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			addr = ap.Addr()
		} else if ip, err := netip.ParseAddr(a.String()); err == nil {
			addr = ip
		}
	}
	addr = addr.Unmap().WithZone("")
	switch {
	case addr.Is4():
		return netip.PrefixFrom(addr, 32)
	case addr.Is6():
		p, _ := addr.Prefix(64)
		return p
	default:
		return netip.Prefix{}
	}
}
