package browser

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/runtime"
)

// hangingJob navigates, then waits for text that never appears; the test
// acts on the browser when step 1 starts.
func hangingJob(t *testing.T, site string) runtime.Spec {
	return loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "wait_for", "text": "never shown", "timeout_ms": 20000},
	))
}

// onStep returns a channel closed when step n starts.
func onStep(e *Executor, n int) <-chan struct{} {
	ch := make(chan struct{})
	e.hooks.stepStarted = func(i int) {
		if i == n {
			close(ch)
		}
	}
	return ch
}

// afterCrash checks that the executor runs the next job on a new browser.
func afterCrash(t *testing.T, e *Executor, site string, oldPID int) {
	t.Helper()
	e.hooks.stepStarted = nil
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "extract", "selector": "p", "name": "p"},
	)))
	mustOK(t, r)
	if values(t, r)["p"] != "alive" {
		t.Errorf("next job read %s, want alive", r.Stdout)
	}
	// The job may have run on another lane while the failed one was still
	// cleaning up; either way no lane may still use the old process.
	pids := e.browserPIDs()
	if slices.Contains(pids, oldPID) || slices.Equal(pids, make([]int, len(pids))) {
		t.Errorf("browser PIDs after the failure are %v, want new processes (old %d)", pids, oldPID)
	}
}

func alivePage(t *testing.T) string {
	return newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { html(w, "<p>alive</p>") })).URL
}

func TestBrowserKilledMidJob(t *testing.T) {
	e := newExecutor(t, Config{})
	site := alivePage(t)
	started := onStep(e, 1)
	pid := e.browserPID()
	go func() {
		<-started
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}()
	r := run(t, e, hangingJob(t, site))
	if r.Reason != runtime.ReasonCrashed || !strings.Contains(r.Message, "browser process died") || !strings.Contains(r.Message, "steps[1]") {
		t.Fatalf("got %q %q, want crashed naming the step and the dead browser", r.Reason, r.Message)
	}
	afterCrash(t, e, site, pid)
}

func TestBrowserHangs(t *testing.T) {
	e := newExecutor(t, Config{})
	site := alivePage(t)
	pid := e.browserPID()
	e.lanes[0].br.cur.probeLimit = time.Second // the browser will be stopped: no false alarm possible
	started := onStep(e, 1)
	go func() {
		<-started
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}()
	spec := loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "wait_for", "text": "never shown", "timeout_ms": 500},
	))
	r := run(t, e, spec)
	_ = syscall.Kill(pid, syscall.SIGCONT) // let the killed process be reaped
	if r.Reason != runtime.ReasonCrashed || !strings.Contains(r.Message, "stopped responding") {
		t.Fatalf("got %q %q, want crashed because the browser stopped responding", r.Reason, r.Message)
	}
	afterCrash(t, e, site, pid)
}

func TestRendererKilledMidJob(t *testing.T) {
	e := newExecutor(t, Config{})
	site := alivePage(t)
	pid := e.browserPID()
	started := onStep(e, 1)
	go func() {
		<-started
		for _, r := range descendants(pid, "--type=renderer") {
			_ = syscall.Kill(r, syscall.SIGKILL)
		}
	}()
	r := run(t, e, hangingJob(t, site))
	if r.Reason != runtime.ReasonCrashed || !strings.Contains(r.Message, "page crashed") {
		t.Fatalf("got %q %q, want crashed because the page's renderer died", r.Reason, r.Message)
	}
	// The browser itself survived; the next job reuses it.
	e.hooks.stepStarted = nil
	r = run(t, e, loopbackSpec(script(t, map[string]any{"action": "navigate", "url": site + "/"})))
	mustOK(t, r)
	if got := e.browserPID(); got != pid {
		t.Errorf("browser PID %d after a renderer crash, want the same browser %d", got, pid)
	}
}

// descendants lists the processes below pid whose command line contains
// arg.
func descendants(pid int, arg string) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	for p := range parent {
		for a := parent[p]; a > 1; a = parent[a] {
			if a == pid {
				cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
				if strings.Contains(string(cmd), arg) {
					out = append(out, p)
				}
				break
			}
		}
	}
	return out
}

func TestCancelAndClose(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1})
	site := alivePage(t)

	// The caller cancels mid-step.
	started := onStep(e, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	r := e.Run(ctx, hangingJob(t, site))
	if r.Reason != runtime.ReasonCanceled {
		t.Fatalf("caller cancel: got %q %q, want canceled", r.Reason, r.Message)
	}

	// A job waiting for the only slot gives up with its context.
	started = onStep(e, 1)
	done := make(chan runtime.Result, 1)
	go func() { done <- run(t, e, hangingJob(t, site)) }()
	<-started
	wctx, wcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	r = e.Run(wctx, hangingJob(t, site))
	wcancel()
	if r.Reason != runtime.ReasonCanceled || !strings.Contains(r.Message, "slot") {
		t.Fatalf("slot wait: got %q %q, want canceled while waiting for a slot", r.Reason, r.Message)
	}

	// Close ends the running job and refuses new ones.
	pid := e.browserPID()
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	if err := e.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r := <-done; r.Reason != runtime.ReasonCanceled || !strings.Contains(r.Message, "closed") {
		t.Fatalf("running job at Close: got %q %q, want canceled because the executor closed", r.Reason, r.Message)
	}
	if r := run(t, e, hangingJob(t, site)); r.Reason != runtime.ReasonCanceled {
		t.Fatalf("job after Close: got %q %q, want canceled", r.Reason, r.Message)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the browser process still runs after Close")
	}
}

// TestNoGoroutineLeak: after Close, nothing the executor started is left
// running in this process.
func TestNoGoroutineLeak(t *testing.T) {
	site := alivePage(t)
	path := requireChromium(t)
	before := goruntime.NumGoroutine()
	e, err := New(context.Background(), Config{ExecPath: path, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	_ = run(t, e, loopbackSpec(script(t, map[string]any{"action": "navigate", "url": site + "/"})))
	_ = run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "click", "selector": "#missing", "timeout_ms": 100})))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for goruntime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", goruntime.NumGoroutine(), before, buf[:goruntime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A step the browser refuses says what was refused and what to name
// instead, not DevTools' raw "Element is not focusable (-32000)".
func TestRefusedStepsSayWhy(t *testing.T) {
	e := newExecutor(t, Config{Slots: 1})
	site := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		html(w, `<p id="p">text</p>`)
	})).URL
	r := run(t, e, loopbackSpec(script(t,
		map[string]any{"action": "navigate", "url": site + "/"},
		map[string]any{"action": "type", "selector": "#p", "text": "x"},
	)))
	if r.Reason != runtime.ReasonStepFailed || !strings.Contains(r.Message, "steps[1] (type): typing into #p: the element cannot take keyboard input (it is not focusable): name an input") ||
		strings.Contains(r.Message, "-32000") {
		t.Fatalf("typing into a paragraph: %q %q", r.Reason, r.Message)
	}
}
