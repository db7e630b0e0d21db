package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// tinyModule is the smallest module the node accepts: one exported
// _start that returns at once. Submitting it costs little besides the
// commit itself.
var tinyModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: () -> ()
	0x03, 0x02, 0x01, 0x00, // function section: one function of type 0
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // export "_start" = func 0
	0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code section: empty body
}

// unplaceable keeps benchmark jobs queued (no node has this label), so
// each submission is one commit and no placement or run traffic follows.
var unplaceable = map[string]string{"bench-no-such-label": "1"}

// runCluster forms a cluster of three palyra processes on loopback and
// measures, over trials, leader failover and failure detection under
// SIGKILL (restarting the killed node on its data dir after each), then
// worker SIGKILL with jobs running, over workerTrials; with throughput,
// also commit latency beside the fsync floor and job throughput.
func runCluster(ctx context.Context, bin string, o clusterOpts) error {
	c, done, err := formCluster(ctx, bin, "palyra-bench-cluster-")
	if err != nil {
		return err
	}
	defer done()
	timers, err := node.TimersFor(node.NetworkLAN)
	if err != nil {
		return err
	}
	fmt.Printf("cluster: 3 palyra processes on 127.0.0.1, production timers, fsync on\n")
	fmt.Printf("timers in use (%s)\n\n", timers)

	var failover, detect, rejoin []time.Duration
	starts := 0
	for i := range o.trials {
		leader, f, d, err := killLeaderTrial(ctx, c)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		r, n, err := restart(ctx, c, leader)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		failover, detect, rejoin = append(failover, f), append(detect, d), append(rejoin, r)
		starts += n
		fmt.Fprintf(os.Stderr, "  trial %d/%d: failover %s, detection %s, restarted node healthy after %s (%d start(s))\n",
			i+1, o.trials, f.Round(time.Millisecond), d.Round(time.Millisecond), r.Round(100*time.Millisecond), n)
	}
	if o.trials > 0 {
		printTrials(failover, detect)
		fmt.Printf("restart of the killed node on its data dir, after the new leader is known → every node sees 3 alive voters:\n")
		fmt.Printf("  p50 %s   p99 %s   (%d starts for %d restarts; a start that exits is retried after 1s)\n\n",
			ms(pct(rejoin, 50)), ms(pct(rejoin, 99)), starts, o.trials)
	}
	sleep, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "examples", "sleep.wasm"))
	if err != nil {
		return fmt.Errorf("%w (run 'make examples' first)", err)
	}
	if o.workerTrials > 0 {
		if err := workerKill(ctx, c, sleep, o.workerTrials, o.workerJob); err != nil {
			return err
		}
	}
	if !o.throughput {
		return nil
	}
	if err := commitLatency(ctx, c, o.commits); err != nil {
		return err
	}
	reverse, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "examples", "reverse.wasm"))
	if err != nil {
		return fmt.Errorf("%w (run 'make examples' first)", err)
	}
	return clusterThroughput(ctx, c, reverse)
}

// clusterOpts selects the 3-process cluster benchmarks.
type clusterOpts struct {
	trials       int           // leader SIGKILL trials
	workerTrials int           // worker SIGKILL trials
	workerJob    time.Duration // how long each job of a worker trial runs
	commits      int           // sequential commits per series
	throughput   bool          // commit latency and job throughput
}

func printTrials(failover, detect []time.Duration) {
	trials := len(failover)
	fmt.Printf("leader failover (SIGKILL the leader → a survivor reports a new leader), %d trials, polled every ~10ms:\n", trials)
	fmt.Printf("  p50 %s   p99 %s   min %s\n", ms(pct(failover, 50)), ms(pct(failover, 99)), ms(pct(failover, 0)))
	fmt.Printf("failure detection (SIGKILL → a survivor's node list shows it not alive), %d trials:\n", trials)
	fmt.Printf("  p50 %s   p99 %s   min %s\n\n", ms(pct(detect, 50)), ms(pct(detect, 99)), ms(pct(detect, 0)))
}

// killLeaderTrial waits for a healthy cluster, SIGKILLs the leader and
// polls the survivors until one reports a new leader and one lists the
// killed node as not alive.
func killLeaderTrial(ctx context.Context, c *procCluster) (leader *nodeProc, failover, detect time.Duration, err error) {
	leader, err = c.healthy(ctx, 3, 2*time.Minute)
	if err != nil {
		return nil, 0, 0, err
	}
	var survivors []*nodeProc
	for _, p := range c.running() {
		if p != leader {
			survivors = append(survivors, p)
		}
	}
	leader.kill()
	t0 := time.Now()
	for failover == 0 || detect == 0 {
		if ctx.Err() != nil {
			return nil, 0, 0, ctx.Err()
		}
		if time.Since(t0) > 30*time.Second {
			return nil, 0, 0, fmt.Errorf("after 30s: failover %v, detection %v (0 = not seen)", failover, detect)
		}
		for _, s := range survivors {
			if failover == 0 {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				resp, err := s.cl.Node.Status(cctx, connect.NewRequest(&palyrav1.StatusRequest{}))
				cancel()
				if err == nil && strings.HasPrefix(resp.Msg.LeaderId, "n-") && resp.Msg.LeaderId != leader.id {
					failover = time.Since(t0)
				}
			}
			if detect == 0 {
				if ns, err := listNodes(ctx, s, 300*time.Millisecond); err == nil {
					for _, n := range ns {
						if n.Id == leader.id && n.State != "alive" {
							detect = time.Since(t0)
						}
					}
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return leader, failover, detect, nil
}

// commitLatency times sequential submissions through the leader and
// through a follower, and write+fsync of a small record in the same
// directory as the nodes' data.
func commitLatency(ctx context.Context, c *procCluster, n int) error {
	leader, err := c.healthy(ctx, 3, 2*time.Minute)
	if err != nil {
		return err
	}
	var follower *nodeProc
	for _, p := range c.running() {
		if p != leader {
			follower = p
			break
		}
	}
	submit := func(p *nodeProc) (time.Duration, error) {
		t0 := time.Now()
		_, err := p.cl.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{
			WasmModule: tinyModule, Input: []byte("x"), Constraints: unplaceable}))
		if err != nil {
			return 0, fmt.Errorf("submit via %s: %w", p.name, p.cl.Explain(err))
		}
		return time.Since(t0), nil
	}
	for _, p := range []*nodeProc{leader, follower} { // warm: module cached, connections up
		for range 5 {
			if _, err := submit(p); err != nil {
				return err
			}
		}
	}
	series := func(p *nodeProc) ([]time.Duration, error) {
		out := make([]time.Duration, 0, n)
		for range n {
			d, err := submit(p)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		return out, nil
	}
	viaLeader, err := series(leader)
	if err != nil {
		return err
	}
	viaFollower, err := series(follower)
	if err != nil {
		return err
	}
	floor, err := fsyncFloor(filepath.Join(c.root, "fsync-probe"), n)
	if err != nil {
		return err
	}
	fmt.Printf("commit latency: %d sequential job submissions each (%d-byte cached module, kept queued), 3 voters:\n", n, len(tinyModule))
	fmt.Printf("  via the leader     p50 %s   p99 %s\n", pct(viaLeader, 50), pct(viaLeader, 99))
	fmt.Printf("  via a follower     p50 %s   p99 %s   (forwarded to the leader)\n", pct(viaFollower, 50), pct(viaFollower, 99))
	fmt.Printf("  fsync floor        p50 %s   p99 %s   (64-byte write+fsync on the nodes' filesystem, %s)\n", pct(floor, 50), pct(floor, 99), fsType(c.root))
	fmt.Printf("  leader p50 = %.1f × fsync p50\n\n", float64(pct(viaLeader, 50))/float64(max(pct(floor, 50), time.Microsecond)))
	return nil
}

// fsyncFloor times n appends of a 64-byte record, each followed by fsync.
func fsyncFloor(path string, n int) ([]time.Duration, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rec := make([]byte, 64)
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := f.Write(rec); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// restart starts the killed node p again on its data dir and port,
// starting it again whenever it exits, and returns how long until every
// node sees three alive voters and how many starts it took.
func restart(ctx context.Context, c *procCluster, p *nodeProc) (time.Duration, int, error) {
	p.cl.Close()
	p.cl = nil // its connection belonged to the killed process
	t0 := time.Now()
	starts := 0
	for {
		if ctx.Err() != nil {
			return 0, starts, ctx.Err()
		}
		if time.Since(t0) > 2*time.Minute {
			return 0, starts, fmt.Errorf("restarted %s did not stay up within 2m (%d starts):\n%s", p.name, starts, p.logTail())
		}
		if starts > 0 {
			time.Sleep(time.Second)
		}
		starts++
		offset := logSize(p)
		if err := p.start(c.bin); err != nil {
			return 0, starts, err
		}
		if err := c.waitReady(ctx, p, offset, 90*time.Second); err != nil {
			continue
		}
		if _, err := c.healthy(ctx, 3, time.Minute); err != nil {
			return 0, starts, err
		}
		return time.Since(t0), starts, nil
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

func ms(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }

// fsType names the filesystem holding path (fsync costs differ wildly).
func fsType(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return "unknown filesystem"
	}
	names := map[int64]string{0xEF53: "ext4", 0x01021994: "tmpfs", 0x794c7630: "overlayfs", 0x58465342: "xfs", 0x9123683e: "btrfs"}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("filesystem type %#x", st.Type)
}
