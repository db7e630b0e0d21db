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

// workerKill runs 3-second jobs on every node, SIGKILLs a worker (not the
// leader) while its jobs run, and reports how long those jobs took to
// complete elsewhere.
func workerKill(ctx context.Context, c *procCluster, sleepMod []byte) error {
	leader, err := c.healthy(ctx, 3, 2*time.Minute)
	if err != nil {
		return err
	}
	var victim *nodeProc
	for _, p := range c.running() {
		if p != leader {
			victim = p
			break
		}
	}
	type res struct {
		j   *palyrav1.Job
		end time.Time
		err error
	}
	const n = 12
	results := make(chan res, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			_, j, err := runToCompletion(ctx, leader.cl, sleepMod, "3s")
			results <- res{j, time.Now(), err}
		}(i)
	}
	// Wait until the victim runs some of them, then kill it.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := leader.cl.Jobs.ListJobs(ctx, connect.NewRequest(&palyrav1.ListJobsRequest{
			Phase: palyrav1.JobPhase_JOB_PHASE_RUNNING, NodeId: victim.id}))
		if err == nil && len(resp.Msg.Jobs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no job ran on %s", victim.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	killed := time.Now()
	victim.kill()
	var moved []time.Duration
	for i := 0; i < n; i++ {
		r := <-results
		if r.err != nil {
			return r.err
		}
		if r.j.Attempt > 1 {
			moved = append(moved, r.end.Sub(killed))
		}
	}
	fmt.Printf("worker SIGKILL with jobs running (12 × 3s jobs, one non-leader worker killed):\n")
	fmt.Printf("  %d jobs re-dispatched, all completed elsewhere; kill → completed p50 %s   p99 %s\n",
		len(moved), ms(pct(moved, 50)), ms(pct(moved, 99)))
	fmt.Printf("  (detection ≈ gossip suspicion + %s grace, then a fresh 3s run)\n\n", "3s")
	if _, _, err := restart(ctx, c, victim); err != nil {
		fmt.Fprintf(os.Stderr, "  restarting %s: %v\n", victim.name, err)
	}
	return nil
}
