// Package testwatch names a hung test. go test's own -timeout panics with
// the running test's name at the top of a goroutine dump that can run to
// tens of thousands of lines, so a CI log that keeps only its tail shows
// neither the test nor the goroutines that hold it. Track arms a timer per
// test, covering its cleanups; when one runs past its limit, testwatch
// prints the full dump, then a short summary last (the test, and the
// goroutines of this module blocked for a minute or more), and exits.
package testwatch

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultLimit is how long one test, cleanups included, may run before it
// is called hung. PALYRA_TEST_HANG_LIMIT (a Go duration) overrides it.
const DefaultLimit = 10 * time.Minute

var (
	mu      sync.Mutex
	tracked = map[testing.TB]bool{}
)

// Track arms the watchdog for t, once per test (later calls are no-ops).
// Call it before registering t's other cleanups so that the watch spans
// them: a test that hangs closing what it started is named too.
func Track(t testing.TB) {
	mu.Lock()
	defer mu.Unlock()
	if tracked[t] {
		return
	}
	tracked[t] = true
	limit := DefaultLimit
	if v, err := time.ParseDuration(os.Getenv("PALYRA_TEST_HANG_LIMIT")); err == nil && v > 0 {
		limit = v
	}
	name := t.Name()
	timer := time.AfterFunc(limit, func() { report(name, limit) })
	t.Cleanup(func() {
		timer.Stop()
		mu.Lock()
		delete(tracked, t)
		mu.Unlock()
	})
}

func report(name string, limit time.Duration) {
	buf := make([]byte, 64<<20)
	dump := string(buf[:runtime.Stack(buf, true)])
	fmt.Fprintf(os.Stderr, "\n=== testwatch: %s has run for %v; every goroutine:\n%s\n", name, limit, dump)
	fmt.Fprintf(os.Stderr, "=== testwatch: the test's goroutine and those in this module blocked for a minute or more:\n%s", Summary(dump, name, 30))
	fmt.Fprintf(os.Stderr, "=== testwatch: %s hung: still running after %v (set PALYRA_TEST_HANG_LIMIT to change the limit)\n", name, limit)
	os.Exit(3)
}

var (
	longWait      = regexp.MustCompile(`^goroutine \d+ \[([^,\]]+), (\d+) minutes\]`)
	goroutineHead = regexp.MustCompile(`^goroutine \d+ \[([^,\]]+)`)
)

// Summary condenses a goroutine dump to the goroutines blocked for a
// minute or more with a frame in this module, and the goroutines running
// test or a function literal of it (busy rather than blocked, perhaps):
// one line giving the state
// and how many goroutines share the stack, then their functions in this
// module, innermost first. It keeps at most maxLines lines.
func Summary(dump, test string, maxLines int) string {
	test, _, _ = strings.Cut(test, "/")
	type group struct {
		head  string
		n     int
		lines []string
	}
	var order []string
	groups := map[string]*group{}
	for _, g := range strings.Split(dump, "\n\n") {
		lines := strings.Split(strings.TrimSpace(g), "\n")
		m := longWait.FindStringSubmatch(lines[0])
		if m == nil {
			h := goroutineHead.FindStringSubmatch(lines[0])
			if h == nil || !strings.Contains(g, "."+test+"(") && !strings.Contains(g, "."+test+".func") {
				continue
			}
			m = []string{"", h[1], "<1"}
		}
		var fns []string
		blockedIn := "" // the innermost frame outside the runtime, if not in this module
		for i := 1; i < len(lines); i++ {
			l := lines[i]
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by ") {
				continue
			}
			fn := l
			if j := strings.LastIndex(fn, "("); j > 0 {
				fn = fn[:j]
			}
			if i+1 < len(lines) {
				if at := strings.TrimSpace(lines[i+1]); at != "" {
					if parts := strings.Split(at, "/"); len(parts) > 2 {
						at = strings.Join(parts[len(parts)-2:], "/")
					}
					if k := strings.LastIndex(at, " +0x"); k > 0 {
						at = at[:k]
					}
					fn += " " + at
				}
			}
			if strings.Contains(l, "palyra-mesh/palyra/") {
				fns = append(fns, "    "+strings.TrimPrefix(fn, "github.com/palyra-mesh/palyra/"))
			} else if len(fns) == 0 && blockedIn == "" && !isRuntime(l) {
				blockedIn = "    (in " + fn + ")"
			}
		}
		if len(fns) > 4 {
			fns = fns[:4]
		}
		if len(fns) > 0 && blockedIn != "" {
			fns = append([]string{blockedIn}, fns...)
		}
		if len(fns) == 0 {
			continue
		}
		key := m[1] + "|" + strings.Join(fns, "|")
		if gr, ok := groups[key]; ok {
			gr.n++
			continue
		}
		groups[key] = &group{head: m[1] + ", " + m[2] + " min", n: 1, lines: fns}
		order = append(order, key)
	}
	var b strings.Builder
	left := maxLines
	for i, k := range order {
		gr := groups[k]
		need := 1 + len(gr.lines)
		if need > left {
			fmt.Fprintf(&b, "  … %d more stacks\n", len(order)-i)
			break
		}
		fmt.Fprintf(&b, "  [%s] ×%d\n%s\n", gr.head, gr.n, strings.Join(gr.lines, "\n"))
		left -= need
	}
	return b.String()
}

// isRuntime reports whether a stack line is a frame of the Go runtime or of
// the synchronisation it blocks in, which says nothing of who waits.
func isRuntime(l string) bool {
	for _, p := range []string{"runtime.", "sync.", "internal/", "time.Sleep", "context."} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}
