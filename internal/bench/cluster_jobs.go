package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// runToCompletion submits one job through cl and waits for its end (one
// RunJob call: what 'job submit --wait' does).
func runToCompletion(ctx context.Context, cl *client.Client, mod []byte, input string) (time.Duration, *palyrav1.Job, error) {
	t0 := time.Now()
	j, err := cl.Run(ctx, &palyrav1.SubmitJobRequest{WasmModule: mod, Input: []byte(input)}, nil)
	if err != nil {
		return 0, nil, cl.Explain(err)
	}
	if j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		return 0, j, fmt.Errorf("job %s %s: %v", j.Id, j.Phase.WireName(), j.Error)
	}
	return time.Since(t0), j, nil
}

// watchToEnd watches job id until it ends; the duration is from t0.
func watchToEnd(ctx context.Context, cl *client.Client, id string, t0 time.Time) (time.Duration, *palyrav1.Job, error) {
	for {
		stream, err := cl.Jobs.WatchJob(ctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
		if err == nil {
			for stream.Receive() {
				if j := stream.Msg().Job; j.Phase.Terminal() {
					stream.Close()
					if j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
						return 0, j, fmt.Errorf("job %s %s: %v", j.Id, j.Phase.WireName(), j.Error)
					}
					return time.Since(t0), j, nil
				}
			}
			stream.Close()
		}
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		time.Sleep(200 * time.Millisecond) // the watched node restarted or lost its leader: follow again
	}
}

// clusterThroughput measures jobs on the 3-node cluster: an open-loop run
// at a fixed offered load, and a closed loop for the sustained maximum.
func clusterThroughput(ctx context.Context, c *procCluster, mod []byte) error {
	nodes := c.running()
	if _, _, err := runToCompletion(ctx, nodes[0].cl, mod, "warm"); err != nil { // module now held by the cluster
		return err
	}
	// A node compiles a module on its first job of it (the 2.5 MB Go
	// module takes ~1–2 s here); the nodes restarted by the trials above
	// have not run it yet. 24 jobs at once spread over the three nodes,
	// so each compiles it before the figures below, and the slowest of
	// them says what a first run costs.
	var wwg sync.WaitGroup
	var wmu sync.Mutex
	var slowest time.Duration
	var warmErr error
	for i := 0; i < 24; i++ {
		wwg.Add(1)
		go func(i int) {
			defer wwg.Done()
			d, _, err := runToCompletion(ctx, nodes[i%len(nodes)].cl, mod, "warm")
			wmu.Lock()
			defer wmu.Unlock()
			if err != nil && warmErr == nil {
				warmErr = err
			}
			slowest = max(slowest, d)
		}(i)
	}
	wwg.Wait()
	if warmErr != nil {
		return fmt.Errorf("warm-up job: %w", warmErr)
	}
	fmt.Printf("cluster jobs, warm-up: 24 at once over the 3 nodes, so each node compiles the %d KiB module once (its first run on a node): slowest %s\n",
		len(mod)>>10, ms(slowest))
	const offered, seconds = 40, 10
	var mu sync.Mutex
	var lat []time.Duration
	var failed int
	var wg sync.WaitGroup
	start := time.Now()
	tick := time.NewTicker(time.Second / offered)
	for i := 0; i < offered*seconds; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d, _, err := runToCompletion(ctx, nodes[i%len(nodes)].cl, mod, fmt.Sprint(i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			lat = append(lat, d)
		}(i)
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(start)
	fmt.Printf("cluster jobs, open loop: %d jobs/s offered for %ds (trivial wasm job, submitted round-robin to the 3 nodes):\n", offered, seconds)
	fmt.Printf("  completed %d (%d failed) at %.1f jobs/s   submit→completed p50 %s   p99 %s\n",
		len(lat), failed, float64(len(lat))/elapsed.Seconds(), ms(pct(lat, 50)), ms(pct(lat, 99)))

	const total, conc = 600, 24
	work := make(chan int, total)
	for i := 0; i < total; i++ {
		work <- i
	}
	close(work)
	lat, failed = nil, 0
	start = time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				d, _, err := runToCompletion(ctx, nodes[i%len(nodes)].cl, mod, fmt.Sprint(i))
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed = time.Since(start)
	fmt.Printf("cluster jobs, closed loop: %d jobs, %d concurrent submitters:\n", total, conc)
	fmt.Printf("  sustained %.0f jobs/s   submit→completed p50 %s   p99 %s   (%d failed)\n\n",
		float64(len(lat))/elapsed.Seconds(), ms(pct(lat, 50)), ms(pct(lat, 99)), failed)
	return nil
}

// workerKill runs trials of workerKillTrial, restarting the killed worker
// after each, and prints kill → re-placed and kill → completed elsewhere,
// per trial the last of the killed worker's jobs.
func workerKill(ctx context.Context, c *procCluster, sleepMod []byte, trials int, jobLen time.Duration) error {
	var placed, done, rejoin []time.Duration
	moved := 0
	for i := range trials {
		victim, p, d, n, err := workerKillTrial(ctx, c, sleepMod, jobLen)
		if err != nil {
			return fmt.Errorf("worker trial %d: %w", i+1, err)
		}
		placed, done, moved = append(placed, p), append(done, d), moved+n
		r, starts, err := restart(ctx, c, victim)
		if err != nil {
			return fmt.Errorf("worker trial %d: %w", i+1, err)
		}
		rejoin = append(rejoin, r)
		fmt.Fprintf(os.Stderr, "  worker trial %d/%d: %d jobs moved, re-placed %s, completed %s after the kill; restarted, healthy after %s (%d start(s))\n",
			i+1, trials, n, p.Round(time.Millisecond), d.Round(time.Millisecond), r.Round(100*time.Millisecond), starts)
	}
	fmt.Printf("worker SIGKILL with jobs running (12 × %s jobs over the 3 nodes, a non-leader worker killed), %d trials, %d jobs moved:\n", jobLen, trials, moved)
	fmt.Printf("  kill → its jobs re-placed elsewhere    p50 %s   p99 %s\n", ms(pct(placed, 50)), ms(pct(placed, 99)))
	fmt.Printf("  kill → its jobs completed elsewhere    p50 %s   p99 %s   (detection + dead-worker grace + a fresh %s run)\n",
		ms(pct(done, 50)), ms(pct(done, 99)), jobLen)
	// A follower killed with the leader's calls in flight to it: it
	// rejoined 3–6 s late until mesh closed the dead connections it had.
	fmt.Printf("  the killed follower restarted → ready, every node sees 3 alive voters    p50 %s   p99 %s\n\n",
		ms(pct(rejoin, 50)), ms(pct(rejoin, 99)))
	return nil
}

// workerKillTrial submits 12 jobs that each run jobLen, SIGKILLs a worker
// that is not the leader as soon as one of them started there, and
// returns how long after the kill the last of the jobs that had to move
// was placed again and completed, and how many moved.
func workerKillTrial(ctx context.Context, c *procCluster, sleepMod []byte, jobLen time.Duration) (victim *nodeProc, placed, done time.Duration, moved int, err error) {
	leader, err := c.healthy(ctx, 3, 2*time.Minute)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	for _, p := range c.running() {
		if p != leader {
			victim = p
			break
		}
	}
	type res struct {
		job          *palyrav1.Job
		movedAt, end time.Time
		err          error
	}
	const n = 12
	results := make(chan res, n)
	for range n {
		go func() {
			resp, err := leader.cl.Submit(ctx, &palyrav1.SubmitJobRequest{WasmModule: sleepMod, Input: []byte(jobLen.String())})
			if err != nil {
				results <- res{err: leader.cl.Explain(err)}
				return
			}
			j, movedAt, err := watchMoves(ctx, leader.cl, resp.Job.Id)
			results <- res{job: j, movedAt: movedAt, end: time.Now(), err: err}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := leader.cl.Jobs.ListJobs(ctx, connect.NewRequest(&palyrav1.ListJobsRequest{
			Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, NodeId: victim.id, Stale: true}))
		started := false
		if err == nil {
			for _, j := range resp.Msg.Jobs {
				started = started || j.StartedAtMs > 0
			}
		}
		if started {
			break
		}
		if time.Now().After(deadline) {
			return nil, 0, 0, 0, fmt.Errorf("no job started on %s", victim.name)
		}
		time.Sleep(5 * time.Millisecond)
	}
	killed := time.Now()
	victim.kill()
	for range n {
		r := <-results
		if r.err != nil {
			return nil, 0, 0, 0, r.err
		}
		if r.job.Attempt > 1 {
			moved++
			placed, done = max(placed, r.movedAt.Sub(killed)), max(done, r.end.Sub(killed))
		}
	}
	if moved == 0 {
		return nil, 0, 0, 0, fmt.Errorf("every job finished before %s was killed: make -worker-job longer", victim.name)
	}
	return victim, placed, done, moved, nil
}

// watchMoves watches job id to its end and returns it, with when the watch
// first saw it placed again as a later attempt (zero if never).
func watchMoves(ctx context.Context, cl *client.Client, id string) (*palyrav1.Job, time.Time, error) {
	var movedAt time.Time
	for {
		stream, err := cl.Jobs.WatchJob(ctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
		if err == nil {
			for stream.Receive() {
				j := stream.Msg().Job
				if j.Attempt > 1 && movedAt.IsZero() && j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING {
					movedAt = time.Now()
				}
				if j.Phase.Terminal() {
					stream.Close()
					if j.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
						return j, movedAt, fmt.Errorf("job %s %s: %v", j.Id, j.Phase.WireName(), j.Error)
					}
					return j, movedAt, nil
				}
			}
			stream.Close()
		}
		if ctx.Err() != nil {
			return nil, movedAt, ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
}
