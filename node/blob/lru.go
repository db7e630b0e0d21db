package blob

import (
	"container/list"
	"sync"
)

// LRU is a bounded map from blob hash to V that forgets the least recently
// used entry when full: a memory of facts about blobs ("validated as a
// module", "held by these nodes") whose loss only costs redoing the work.
// It is safe for concurrent use.
type LRU[V any] struct {
	mu  sync.Mutex
	max int
	ll  *list.List // front = most recently used; values are *lruEntry[V]
	m   map[string]*list.Element
}

type lruEntry[V any] struct {
	key string
	val V
}

// NewLRU returns an LRU holding at most size entries (at least 1).
func NewLRU[V any](size int) *LRU[V] {
	return &LRU[V]{max: max(1, size), ll: list.New(), m: map[string]*list.Element{}}
}

// Get returns key's value and marks it used.
func (c *LRU[V]) Get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*lruEntry[V]).val, true
}

// Add sets key's value, forgetting the least recently used entry if full.
func (c *LRU[V]) Add(key string, val V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		e.Value.(*lruEntry[V]).val = val
		c.ll.MoveToFront(e)
		return
	}
	c.m[key] = c.ll.PushFront(&lruEntry[V]{key: key, val: val})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.m, old.Value.(*lruEntry[V]).key)
	}
}

// Remove forgets key.
func (c *LRU[V]) Remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[key]; ok {
		c.ll.Remove(e)
		delete(c.m, key)
	}
}

// Len reports how many entries are held.
func (c *LRU[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
