package blob

import (
	"fmt"
	"sync"
	"testing"
)

func TestLRUForgetsLeastRecentlyUsed(t *testing.T) {
	c := NewLRU[int](3)
	c.Add("a", 1)
	c.Add("b", 2)
	c.Add("c", 3)
	if v, ok := c.Get("a"); !ok || v != 1 { // a is now the most recent
		t.Fatalf("Get(a) = %v, %v", v, ok)
	}
	c.Add("d", 4) // forgets b
	if _, ok := c.Get("b"); ok {
		t.Fatal("b kept although it was the least recently used of 4 entries in an LRU of 3")
	}
	for k, want := range map[string]int{"a": 1, "c": 3, "d": 4} {
		if v, ok := c.Get(k); !ok || v != want {
			t.Fatalf("Get(%s) = %v, %v; want %d", k, v, ok, want)
		}
	}
	c.Add("c", 30)
	if v, _ := c.Get("c"); v != 30 || c.Len() != 3 {
		t.Fatalf("after re-adding c: c = %d, len %d; want 30 and 3", v, c.Len())
	}
	c.Remove("c")
	if _, ok := c.Get("c"); ok || c.Len() != 2 {
		t.Fatalf("after Remove(c): present %v, len %d", ok, c.Len())
	}
}

func TestLRUConcurrentUseStaysBounded(t *testing.T) {
	c := NewLRU[struct{}](50)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := fmt.Sprintf("%d-%d", g, i)
				c.Add(k, struct{}{})
				c.Get(k)
			}
		}(g)
	}
	wg.Wait()
	if c.Len() != 50 {
		t.Fatalf("len %d after 2000 adds, want the bound 50", c.Len())
	}
}
