// Command etcd measures a 3-member etcd cluster on loopback as a baseline
// for palyra's job throughput: closed-loop Puts (each client does one Put,
// waits for the reply, repeats) at a few concurrency levels, through etcd's
// own gRPC client. It starts the members itself (each with its own temp
// data dir, production defaults, fsync on), and stops and removes them at
// the end, on error and on SIGINT/SIGTERM too.
//
// It lives in its own Go module so that the main module does not take on
// etcd's client and its dependencies. scripts/etcd.sh installs etcd (Debian's
// etcd-server) when it is missing and runs this; `make bench` calls that.
//
// Output, per concurrency level: a line for people and a line for scripts,
//
//	etcd 3 members, 16 clients: 4512 puts/s  p50 3.1ms p99 9.8ms
//	ETCD_PUTS_PER_SEC c=16 value=4512.3
//
// and with -out FILE a JSON object keyed by concurrency (see DESIGN.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	etcdBin := flag.String("etcd", "etcd", "etcd server binary (looked up on PATH)")
	members := flag.Int("members", 3, "cluster members")
	conc := flag.String("c", "16,64", "comma-separated client counts, run in this order")
	warmup := flag.Duration("warmup", time.Second, "warm-up per concurrency level, not measured")
	dur := flag.Duration("duration", 5*time.Second, "measured time per concurrency level")
	valueSize := flag.Int("value", 64, "value size in bytes")
	keys := flag.Int("keys", 1000, "distinct keys per client (each client has its own prefix)")
	out := flag.String("out", "", "also write the results as JSON to this file")
	asJSON := flag.Bool("json", false, "also print the results as JSON on stdout")
	flag.Parse()

	levels, err := parseLevels(*conc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd bench:", err)
		os.Exit(2)
	}
	if *members < 1 || *valueSize < 1 || *keys < 1 || *dur <= 0 || *warmup < 0 {
		fmt.Fprintln(os.Stderr, "etcd bench: -members, -value, -keys and -duration must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := loadConfig{warmup: *warmup, duration: *dur, valueSize: *valueSize, keys: *keys}
	if err := run(ctx, *etcdBin, *members, levels, cfg, *out, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "etcd bench:", err)
		os.Exit(1)
	}
}

func parseLevels(s string) ([]int, error) {
	var levels []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad client count %q in -c", f)
		}
		levels = append(levels, n)
	}
	return levels, nil
}

func run(ctx context.Context, etcdBin string, members int, levels []int, cfg loadConfig, out string, asJSON bool) (err error) {
	bin, err := exec.LookPath(etcdBin)
	if err != nil {
		return fmt.Errorf("%w (scripts/etcd.sh installs Debian's etcd-server)", err)
	}
	fmt.Printf("etcd %s (%s), %d members on 127.0.0.1, fsync on, %d-byte values, client go.etcd.io/etcd/client/v3, %s warm-up + %s per level\n",
		etcdVersion(bin), bin, members, cfg.valueSize, cfg.warmup, cfg.duration)
	c, err := startCluster(ctx, bin, members)
	if ctx.Err() != nil {
		return errors.New("interrupted; etcd members stopped")
	}
	if err != nil {
		return err
	}
	defer func() {
		if serr := c.stop(); serr != nil && err == nil {
			err = fmt.Errorf("cleanup: %w", serr)
		}
	}()
	cfg.endpoints = c.endpoints()
	results := make(map[string]result, len(levels))
	for _, n := range levels {
		cfg.clients = n
		r, err := runLoad(ctx, cfg)
		if ctx.Err() != nil {
			return errors.New("interrupted; etcd members stopped")
		}
		if err != nil {
			return fmt.Errorf("%d clients: %w", n, err)
		}
		if err := c.checkExited(); err != nil {
			return err
		}
		results[strconv.Itoa(n)] = r
		line := fmt.Sprintf("etcd %d members, %d clients: %.0f puts/s  p50 %.1fms p99 %.1fms", members, n, r.PutsPerSec, r.P50Ms, r.P99Ms)
		if r.Errors > 0 {
			line += fmt.Sprintf("  (%d errors)", r.Errors)
		}
		fmt.Println(line)
		fmt.Printf("ETCD_PUTS_PER_SEC c=%d value=%.1f\n", n, r.PutsPerSec)
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if asJSON {
		fmt.Println(string(b))
	}
	if out != "" {
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// etcdVersion is the "etcd Version: X" line of `etcd --version`, or "?".
func etcdVersion(bin string) string {
	cmd := exec.Command(bin, "--version")
	cmd.Env = cleanEnv()
	b, err := cmd.Output()
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
