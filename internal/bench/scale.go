package main

import (
	"context"
	"strings"

	"connectrpc.com/connect"

	_ "embed"
	"encoding/json"
	"fmt"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// etcdFigures are the etcd baseline's results (PALYRA_ETCD_RESULTS), by
// concurrency.
type etcdFigures map[string]struct {
	PutsPerSec float64 `json:"puts_per_sec"`
	P50MS      float64 `json:"p50_ms"`
	P99MS      float64 `json:"p99_ms"`
}

func readEtcd() etcdFigures {
	path := os.Getenv("PALYRA_ETCD_RESULTS")
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: etcd results:", err)
		return nil
	}
	var f etcdFigures
	if err := json.Unmarshal(data, &f); err != nil {
		fmt.Fprintln(os.Stderr, "bench: etcd results:", err)
		return nil
	}
	return f
}

// loopResult is one closed-loop run.
type loopResult struct {
	conc     int
	done     int
	failed   int
	elapsed  time.Duration
	lat      []time.Duration
	firstErr error
	// hand-offs (p50 reported): queued→placed, placed→result, result→seen
	place, run, seen []time.Duration
	// CPU the nodes and this client used over the run, in clock ticks
	// (-1: not known): per job, a steadier figure than jobs/s on a
	// machine the loop saturates.
	nodeTicks, clientTicks int64
}

func (r loopResult) rate() float64 { return float64(r.done) / r.elapsed.Seconds() }

// closedLoop runs conc submitters for d: each submits a trivial job
// (round-robin over the nodes), waits for it to complete, and repeats.
func closedLoop(ctx context.Context, c *procCluster, mod []byte, conc int, d time.Duration) loopResult {
	nodes := c.running()
	var mu sync.Mutex
	res := loopResult{conc: conc}
	var seq atomic.Int64
	stop := time.Now().Add(d)
	start := time.Now()
	nodes0, client0 := nodesTicks(nodes), selfTicks()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				i := seq.Add(1)
				lat, j, err := runToCompletion(ctx, nodes[int(i)%len(nodes)].cl, mod, fmt.Sprint(i))
				seenAt := time.Now()
				mu.Lock()
				if err == nil {
					at := func(v int64) time.Time { return time.UnixMilli(v) }
					res.place = append(res.place, at(j.PlacedAtMs).Sub(at(j.SubmittedAtMs)))
					res.run = append(res.run, at(j.FinishedAtMs).Sub(at(j.PlacedAtMs)))
					res.seen = append(res.seen, seenAt.Sub(at(j.FinishedAtMs)))
				}
				if err != nil {
					res.failed++
					if res.firstErr == nil {
						res.firstErr = err
					}
				} else {
					res.done++
					res.lat = append(res.lat, lat)
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.nodeTicks, res.clientTicks = -1, -1
	if n1, c1 := nodesTicks(nodes), selfTicks(); nodes0 >= 0 && n1 >= 0 && client0 >= 0 && c1 >= 0 {
		res.nodeTicks, res.clientTicks = n1-nodes0, c1-client0
	}
	return res
}

// nodesTicks is the CPU ticks the nodes have used; -1 if one is unknown.
func nodesTicks(nodes []*nodeProc) int64 {
	var sum int64
	for _, n := range nodes {
		t := cpuTicks(n)
		if t < 0 {
			return -1
		}
		sum += t
	}
	return sum
}

// selfTicks is the CPU ticks this process has used; -1 if unknown.
func selfTicks() int64 {
	return pidTicks(os.Getpid())
}

// openLoop offers rate jobs/s for d and reports submit→completed latency.
func openLoop(ctx context.Context, c *procCluster, mod []byte, rate float64, d time.Duration) loopResult {
	nodes := c.running()
	var mu sync.Mutex
	res := loopResult{}
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	n := int(d / interval)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			lat, _, err := runToCompletion(ctx, nodes[i%len(nodes)].cl, mod, fmt.Sprint(i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.failed++
				return
			}
			res.done++
			res.lat = append(res.lat, lat)
		}(i)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func printLoop(r loopResult, etcd etcdFigures) {
	line := fmt.Sprintf("  %2d submitters: %6.0f jobs/s   submit→completed p50 %s  p99 %s",
		r.conc, r.rate(), ms(pct(r.lat, 50)), ms(pct(r.lat, 99)))
	if e, ok := etcd[fmt.Sprint(r.conc)]; ok && e.PutsPerSec > 0 {
		line += fmt.Sprintf("   etcd %5.0f puts/s → ratio %.2f×", e.PutsPerSec, r.rate()/e.PutsPerSec)
	}
	if len(r.place) > 0 {
		line += fmt.Sprintf("\n      (p50 hand-offs: submitted→placed %s, placed→result %s, result→seen %s)", ms(pct(r.place, 50)), ms(pct(r.run, 50)), ms(pct(r.seen, 50)))
	}
	if r.nodeTicks >= 0 && r.done > 0 {
		perJob := func(ticks int64) string { // a tick is 10 ms
			return fmt.Sprintf("%.3f ms", float64(ticks)*10/float64(r.done))
		}
		line += fmt.Sprintf("\n      (CPU per job: the 3 nodes %s, this client %s)", perJob(r.nodeTicks), perJob(r.clientTicks))
	}
	if r.failed > 0 {
		line += fmt.Sprintf("   (%d failed: %v)", r.failed, r.firstErr)
	}
	fmt.Println(line)
}

//go:embed cat.wat
var catWAT []byte

// catModule assembles cat.wat (wabt's wat2wasm, installed by make deps).
func catModule(dir string) ([]byte, error) {
	src, out := filepath.Join(dir, "cat.wat"), filepath.Join(dir, "cat.wasm")
	if err := os.WriteFile(src, catWAT, 0o600); err != nil {
		return nil, err
	}
	if b, err := exec.Command("wat2wasm", src, "-o", out).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("wat2wasm: %v: %s (install wabt: make deps)", err, b)
	}
	return os.ReadFile(out)
}

// runScale measures the control plane at scale on a fresh 3-process
// cluster: closed loops at 16 and 64 submitters against etcd's puts/s,
// latency at a tenth of the maximum.
func runScale(ctx context.Context, bin string, loop time.Duration, arrayOnly bool, loopOnly int, historyOnly bool) error {
	c, done, err := formCluster(ctx, bin, "palyra-bench-scale-")
	if err != nil {
		return err
	}
	defer done()
	root := c.root
	if _, err := c.healthy(ctx, 3, 2*time.Minute); err != nil {
		return err
	}
	mod, err := catModule(root)
	if err != nil {
		return err
	}
	for _, n := range c.running() { // every node has the module compiled
		if _, _, err := runToCompletion(ctx, n.cl, mod, "warm"); err != nil {
			return err
		}
	}
	if arrayOnly {
		return arrayRun(ctx, c, mod, arrayTasks)
	}
	if loopOnly > 0 {
		printLoop(closedLoop(ctx, c, mod, loopOnly, loop), readEtcd())
		return nil
	}
	if historyOnly {
		first := closedLoop(ctx, c, mod, 16, loop)
		printLoop(first, readEtcd())
		_, err := withHistory(ctx, c, mod, first.rate(), loop)
		return err
	}
	etcd := readEtcd()
	leader, err := c.healthy(ctx, 3, time.Minute)
	if err != nil {
		return err
	}
	idleRSS := rss(leader)
	idleCPU(c, leader, 10*time.Second)
	fmt.Printf("control plane at scale: 3 palyra processes on 127.0.0.1, trivial wasm job (cat.wat: stdin to stdout), each submitted and awaited (WatchJob) round-robin over the nodes, %s per run:\n", loop)
	timeline(ctx, c, mod, 60)
	var best, first16 float64
	for _, conc := range []int{16, 64} {
		r := closedLoop(ctx, c, mod, conc, loop)
		printLoop(r, etcd)
		best = max(best, r.rate())
		if conc == 16 {
			first16 = r.rate()
		}
	}
	if best > 0 {
		r := openLoop(ctx, c, mod, best/10, loop)
		fmt.Printf("  open loop at a tenth of the maximum (%.0f jobs/s offered): completed %.0f jobs/s, submit→completed p50 %s  p99 %s   (target p50 ≤ 10ms)\n",
			best/10, r.rate(), ms(pct(r.lat, 50)), ms(pct(r.lat, 99)))
	}

	// A job array of 100,000 tasks: its throughput, every result checked;
	// it also leaves 100,000 jobs of history behind.
	before := rss(leader)
	var after int64
	withHist, err := withHistory(ctx, c, mod, first16, loop, func() { after = rss(leader) })
	if err != nil {
		return err
	}
	pruned := retentionRun(ctx, c, leader)
	fmt.Printf("  leader RSS: idle %s, before the array %s, after it (%d more jobs held) %s, after pruning every ended job %s\n",
		mb(idleRSS), mb(before), arrayTasks, mb(after), mb(pruned))
	driftCheck(ctx, c, mod, first16, withHist, loop)
	return nil
}

// withHistory runs the 100,000-task array (its throughput, every result
// checked), which leaves that much history behind, then the 16-submitter
// closed loop again, printed against first (jobs/s). Each of then runs
// between the two.
func withHistory(ctx context.Context, c *procCluster, mod []byte, first float64, loop time.Duration, then ...func()) (withHist float64, err error) {
	if err := arrayRun(ctx, c, mod, arrayTasks); err != nil {
		return 0, err
	}
	for _, f := range then {
		f()
	}
	r := closedLoop(ctx, c, mod, 16, loop)
	fmt.Printf("  flat with history: 16 submitters after %d more jobs of history: %.0f jobs/s = %.2f× the first round (target ≥ 0.9×)\n",
		arrayTasks, r.rate(), r.rate()/first)
	return r.rate(), nil
}

// driftCheck runs the 16-submitter loop once more after the history was
// pruned and prints the round with history against the mean of the rounds
// without it, before and after: on a machine whose speed drifts, the
// literal ratio (against the first round only) moves with the drift, and
// this one does not move with a linear drift.
func driftCheck(ctx context.Context, c *procCluster, mod []byte, first, withHist float64, loop time.Duration) {
	r := closedLoop(ctx, c, mod, 16, loop)
	fmt.Printf("  drift check: 16 submitters again after pruning: %.0f jobs/s; the round with history = %.2f× the mean of the rounds without it (before %.0f, after %.0f)\n",
		r.rate(), withHist/((first+r.rate())/2), first, r.rate())
}

// arrayTasks is the size of the array the benchmark runs.
const arrayTasks = 100_000

// arrayRun submits one array of n tasks (input "task-i"), waits for it to
// end and checks every task's output.
func arrayRun(ctx context.Context, c *procCluster, mod []byte, n int) error {
	cl := c.running()[0].cl
	inputs := make([][]byte, n)
	for i := range inputs {
		inputs[i] = []byte(fmt.Sprintf("task-%d", i))
	}
	start := time.Now()
	resp, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Inputs: inputs})
	if err != nil {
		return fmt.Errorf("array submit: %w", cl.Explain(err))
	}
	accepted := time.Since(start)
	id := resp.Array.GetId()
	for {
		g, err := cl.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
		if err == nil && g.Msg.Array.GetDone() {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	good, bad := 0, 0
	err = cl.ArrayTasks(ctx, id, false, func(j *palyrav1.Job) error {
		if j.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED && string(j.Stdout) == fmt.Sprintf("task-%d", j.ArrayIndex) {
			good++
		} else {
			bad++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("array results: %w", cl.Explain(err))
	}
	fmt.Printf("  job array of %d tasks: accepted in %s (one commit), all ended after %s: %.0f tasks/s (target ≥ 5,000); results checked: %d correct, %d wrong or missing\n",
		n, ms(accepted), elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), good, bad)
	return nil
}

// retentionRun prunes every ended job through the same replicated command
// retention proposes (PruneJobs; 'palyra job prune --older-than 0s'),
// waits until the leader holds none, and returns the leader's RSS then.
func retentionRun(ctx context.Context, c *procCluster, leader *nodeProc) int64 {
	cl := leader.cl
	resp, err := cl.Jobs.PruneJobs(ctx, connect.NewRequest(&palyrav1.PruneJobsRequest{OlderThanMs: 0}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "  prune:", cl.Explain(err))
		return 0
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		st, err := cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
		if err == nil {
			var held uint64
			for _, n := range st.Msg.JobsByPhase {
				held += n
			}
			if held == 0 {
				time.Sleep(6 * time.Second) // the node hands freed memory back within 5s
				fmt.Printf("  pruning: %d ended jobs removed by the replicated prune command\n", resp.Msg.Pruned)
				return rss(leader)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "  prune: jobs still held after 2 minutes")
	return rss(leader)
}

// rss is a process's resident set size in bytes (Linux).
func rss(p *nodeProc) int64 {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

func mb(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// cpuTicks is the user+system CPU time p has used, in clock ticks (1/100 s
// on Linux), from /proc; -1 when it cannot be read.
func cpuTicks(p *nodeProc) int64 {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return -1
	}
	return pidTicks(p.cmd.Process.Pid)
}

// pidTicks is cpuTicks for process pid.
func pidTicks(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name (which may hold spaces), from ")":
	// state is field 3, utime 14 and stime 15.
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return -1
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return ut + st
}

// idleCPU prints how much CPU each node uses over d with no work at all:
// what an idle cluster costs its machines (raft heartbeats and commit
// propagation, gossip, the scheduler's tick, lease renewals).
func idleCPU(c *procCluster, leader *nodeProc, d time.Duration) {
	nodes := c.running()
	before := make([]int64, len(nodes))
	for i, n := range nodes {
		before[i] = cpuTicks(n)
	}
	time.Sleep(d)
	line := fmt.Sprintf("  idle cluster, CPU over %s:", d)
	for i, n := range nodes {
		after := cpuTicks(n)
		if before[i] < 0 || after < 0 {
			continue
		}
		role := "follower"
		if n == leader {
			role = "leader"
		}
		line += fmt.Sprintf(" %s %.1f%%", role, float64(after-before[i])/d.Seconds())
	}
	fmt.Println(line + " of a core")
}

// timeline runs n jobs one at a time and splits submit→completed into its
// hand-offs, from the job record's timestamps (all nodes share this
// machine's clock): accepted (the submit call returns), placed (the
// scheduler's round), finished (the worker's result time), seen (the
// watcher on the submitting node hears it).
func timeline(ctx context.Context, c *procCluster, mod []byte, n int) {
	nodes := c.running()
	var accept, place, run, seen, total []time.Duration
	for i := 0; i < n && ctx.Err() == nil; i++ {
		cl := nodes[i%len(nodes)].cl
		t0 := time.Now()
		resp, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte(fmt.Sprint(i))})
		if err != nil {
			fmt.Fprintln(os.Stderr, "  timeline:", cl.Explain(err))
			return
		}
		t1 := time.Now()
		_, j, err := watchToEnd(ctx, cl, resp.Job.Id, t0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "  timeline:", err)
			return
		}
		t2 := time.Now()
		ms := func(v int64) time.Time { return time.UnixMilli(v) }
		accept = append(accept, t1.Sub(t0))
		place = append(place, ms(j.PlacedAtMs).Sub(ms(j.SubmittedAtMs)))
		run = append(run, ms(j.FinishedAtMs).Sub(ms(j.PlacedAtMs)))
		seen = append(seen, t2.Sub(ms(j.FinishedAtMs)))
		total = append(total, t2.Sub(t0))
	}
	fmt.Printf("  one job at a time (%d jobs), p50 of each hand-off (ms clock): submit→accepted %s, accepted→placed %s, placed→result %s, result→seen by the watcher %s; total %s\n",
		n, ms(pct(accept, 50)), ms(pct(place, 50)), ms(pct(run, 50)), ms(pct(seen, 50)), ms(pct(total, 50)))
}
