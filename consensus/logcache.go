package consensus

import (
	"sync"

	"github.com/hashicorp/raft"
)

// logCache keeps the most recent log entries in memory in front of the
// on-disk log store. The leader reads every entry back to send it to each
// follower; from bbolt that is a page read and a msgpack decode per entry
// per follower (most of the leader's allocation under load, measured).
// raft's own LogCache bounds entries by count, and an entry may be tens of
// MiB here (an array's inputs), so this one bounds them by bytes too.
type logCache struct {
	raft.LogStore

	mu     sync.Mutex
	max    int // entries
	budget int // bytes of entry data
	logs   map[uint64]*raft.Log
	lo, hi uint64 // cached indexes are [lo, hi), contiguous
	bytes  int
}

func newLogCache(store raft.LogStore, maxEntries, budget int) *logCache {
	return &logCache{LogStore: store, max: maxEntries, budget: budget, logs: map[uint64]*raft.Log{}}
}

// GetLog implements raft.LogStore.
func (c *logCache) GetLog(index uint64, out *raft.Log) error {
	c.mu.Lock()
	l, ok := c.logs[index]
	c.mu.Unlock()
	if ok {
		*out = *l
		return nil
	}
	return c.LogStore.GetLog(index, out)
}

// StoreLog implements raft.LogStore.
func (c *logCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: the entries are durable before they
// are cached.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.LogStore.StoreLogs(logs); err != nil {
		c.mu.Lock()
		c.reset()
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		if len(c.logs) > 0 && l.Index != c.hi { // not contiguous: start again
			c.reset()
		}
		if len(c.logs) == 0 {
			c.lo = l.Index
		}
		cp := *l
		c.logs[l.Index] = &cp
		c.hi = l.Index + 1
		c.bytes += len(l.Data)
	}
	for len(c.logs) > 0 && (len(c.logs) > c.max || c.bytes > c.budget) {
		if old := c.logs[c.lo]; old != nil {
			c.bytes -= len(old.Data)
			delete(c.logs, c.lo)
		}
		c.lo++
	}
	return nil
}

// DeleteRange implements raft.LogStore: compaction drops the oldest
// entries (the cache keeps the rest); any other deletion (a follower
// truncating a conflicting tail) empties the cache.
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	switch {
	case len(c.logs) == 0:
	case lo <= c.lo && hi+1 < c.hi:
		for ; c.lo <= hi; c.lo++ {
			if old := c.logs[c.lo]; old != nil {
				c.bytes -= len(old.Data)
				delete(c.logs, c.lo)
			}
		}
	default:
		c.reset()
	}
	c.mu.Unlock()
	return c.LogStore.DeleteRange(lo, hi)
}

// reset empties the cache; c.mu is held.
func (c *logCache) reset() {
	c.logs, c.lo, c.hi, c.bytes = map[uint64]*raft.Log{}, 0, 0, 0
}

// IsMonotonic implements raft.MonotonicLogStore. Saying yes makes raft
// remove every older entry when this server installs a snapshot from the
// leader (or restores one). Otherwise raft compacts only to its trailing
// count below the server's own old last index, so a follower that was far
// behind (its disk full, say) kept thousands of entries the snapshot had
// replaced, and on a tight disk the space an install needed. The entries
// before an installed snapshot are never read again.
func (c *logCache) IsMonotonic() bool { return true }

var _ raft.MonotonicLogStore = (*logCache)(nil)
