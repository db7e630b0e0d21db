// Command bench measures palyra end to end, through the same QUIC + mTLS
// API client the CLI uses. On a single in-process node: submit→completed
// latency (p50/p99) of a trivial wasm job one at a time, and throughput
// with concurrent submitters. On a cluster of three palyra processes:
// leader failover and failure-detection times under SIGKILL, and commit
// latency beside the fsync floor measured in the same run. It prints the
// machine it ran on. Run it with `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func main() {
	seq := flag.Int("n", 200, "jobs for the sequential latency run")
	total := flag.Int("jobs", 1000, "jobs for the throughput run")
	conc := flag.Int("c", 16, "concurrent submitters for the throughput run")
	module := flag.String("wasm", "bin/examples/reverse.wasm", "trivial wasm module")
	single := flag.Bool("single", true, "run the single-node benchmarks")
	cluster := flag.Bool("cluster", true, "run the 3-process cluster benchmarks")
	bin := flag.String("palyra", "bin/palyra", "palyra binary for the cluster benchmarks")
	trials := flag.Int("trials", 10, "leader-kill trials")
	workerTrials := flag.Int("worker-trials", 10, "worker-kill trials")
	workerJob := flag.Duration("worker-job", 500*time.Millisecond, "how long each job runs in the worker-kill trials")
	commits := flag.Int("commits", 200, "sequential commits per series")
	throughput := flag.Bool("throughput", true, "with -cluster: also commit latency and job throughput (off: the failover figures only, as 'make bench-failover')")
	scale := flag.Bool("scale", true, "run the control-plane-at-scale benchmarks (3 processes)")
	loop := flag.Duration("loop", 10*time.Second, "duration of each closed-loop run at scale")
	arrayOnly := flag.Bool("array-only", false, "at scale, run only the 100,000-task array (for profiling)")
	loopOnly := flag.Int("loop-only", 0, "at scale, run only a closed loop with this many submitters (for profiling)")
	historyOnly := flag.Bool("history-only", false, "at scale, run only the flat-with-history figure: 16 submitters, the 100,000-task array, 16 submitters again")
	cpuProfile := flag.String("cpuprofile", "", "write the benchmark process's own CPU profile (its clients) to `FILE`")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	printMachine()
	if *single {
		if err := run(*seq, *total, *conc, *module); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Println()
	}
	if *scale {
		if err := runScale(ctx, *bin, *loop, *arrayOnly, *loopOnly, *historyOnly); err != nil {
			fmt.Fprintln(os.Stderr, "bench: scale:", err)
			os.Exit(1)
		}
		fmt.Println()
	}
	if *cluster {
		o := clusterOpts{trials: *trials, workerTrials: *workerTrials, workerJob: *workerJob, commits: *commits, throughput: *throughput}
		if err := runCluster(ctx, *bin, o); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cluster:", err)
			os.Exit(1)
		}
	}
}

func run(seq, total, conc int, modulePath string) error {
	mod, err := os.ReadFile(modulePath)
	if err != nil {
		return fmt.Errorf("%w (run 'make examples' first)", err)
	}
	dir, err := os.MkdirTemp("", "palyra-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	n, err := node.Start(ctx, node.Config{DataDir: dir, Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer n.Close()
	cred, err := identity.LoadCredential(n.Layout().OperatorDir())
	if err != nil {
		return err
	}
	cl, err := client.New(n.Addr(), cred)
	if err != nil {
		return err
	}
	defer cl.Close()

	fmt.Printf("module: %s (%d KiB), node: 1 voter, wasm slots %d, fsync on\n\n", filepath.Base(modulePath), len(mod)>>10, 2*goruntime.NumCPU())

	// Warm-up: compile cache and connection.
	if _, err := submitAndWait(ctx, cl, mod); err != nil {
		return err
	}

	lat := make([]time.Duration, 0, seq)
	for i := 0; i < seq; i++ {
		d, err := submitAndWait(ctx, cl, mod)
		if err != nil {
			return err
		}
		lat = append(lat, d)
	}
	fmt.Printf("sequential submit→completed, %d jobs (1 in flight):\n", seq)
	fmt.Printf("  p50 %s   p99 %s   max %s\n\n", pct(lat, 50), pct(lat, 99), pct(lat, 100))

	var mu sync.Mutex
	all := make([]time.Duration, 0, total)
	work := make(chan struct{}, total)
	for i := 0; i < total; i++ {
		work <- struct{}{}
	}
	close(work)
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr error
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				d, err := submitAndWait(ctx, cl, mod)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				all = append(all, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return firstErr
	}
	fmt.Printf("throughput, %d jobs, %d concurrent submitters (closed loop):\n", total, conc)
	fmt.Printf("  %.0f jobs/s   submit→completed p50 %s   p99 %s\n", float64(total)/elapsed.Seconds(), pct(all, 50), pct(all, 99))
	return nil
}

func submitAndWait(ctx context.Context, cl *client.Client, mod []byte) (time.Duration, error) {
	t0 := time.Now()
	resp, err := cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte("hello")})
	if err != nil {
		return 0, cl.Explain(err)
	}
	stream, err := cl.Jobs.WatchJob(ctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: resp.Job.Id}))
	if err != nil {
		return 0, cl.Explain(err)
	}
	defer stream.Close()
	for stream.Receive() {
		j := stream.Msg().Job
		if j.Phase.Terminal() {
			if j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
				return 0, fmt.Errorf("job %s %s: %v", j.Id, j.Phase.WireName(), j.Error)
			}
			return time.Since(t0), nil
		}
	}
	return 0, fmt.Errorf("watch ended early: %v", stream.Err())
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[min(i, len(s)-1)].Round(10 * time.Microsecond)
}

func printMachine() {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1] + " kB RAM"
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Printf("machine: %s, %d CPUs, %s, Linux %s, %s\n", model, goruntime.NumCPU(), mem, strings.TrimSpace(string(kernel)), goruntime.Version())
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("date: %s, load average %s\n", time.Now().UTC().Format("2006-01-02"), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
}
