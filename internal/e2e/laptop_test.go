package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// laptop is an operator's paired device: the palyra CLI run with a config
// dir of its own, from a directory without a node data dir, with no --addr
// and no PALYRA_* variables, as on a laptop.
type laptop struct {
	t      *testing.T
	cfgDir string
	cwd    string
}

func newLaptop(t *testing.T) *laptop {
	return &laptop{t: t, cfgDir: filepath.Join(t.TempDir(), "palyra"), cwd: t.TempDir()}
}

func (l *laptop) cli(args ...string) result {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, palyraBin, append([]string{"--config-dir", l.cfgDir}, args...)...)
	cmd.Dir = l.cwd
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PALYRA_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		l.t.Fatalf("laptop: %v", err)
	}
	return result{code, out.String(), errb.String()}
}

// config is what the laptop recorded about the cluster.
func (l *laptop) config() (addr string, peers []string) {
	l.t.Helper()
	var dc struct {
		Addr  string   `json:"addr"`
		Peers []string `json:"peers"`
	}
	data, err := os.ReadFile(filepath.Join(l.cfgDir, "config.json"))
	if err != nil || json.Unmarshal(data, &dc) != nil {
		l.t.Fatalf("device config: %v %s", err, data)
	}
	return dc.Addr, dc.Peers
}

// runJob submits a job and follows it with `job get` until it ends.
func (l *laptop) runJob(wasm, input string, d time.Duration) (job, result) {
	l.t.Helper()
	r := l.cli("job", "submit", "--wasm", wasm, "--input", input)
	if r.code != 0 {
		return job{}, r
	}
	id := strings.TrimSpace(r.stdout)
	deadline := time.Now().Add(d)
	for {
		g := l.cli("job", "get", id, "--json")
		var j job
		if g.code == 0 && json.Unmarshal([]byte(g.stdout), &j) == nil {
			switch j.Phase {
			case "completed", "failed", "aborted", "expired":
				return j, g
			}
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("job %s did not end within %s: %+v", id, d, g)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A laptop paired with the first node of what becomes a three-node
// cluster learns the other nodes on its first call, and from then on keeps
// working, without --addr, while any one node is down: the node it
// recorded first (which led the cluster), then whichever node leads, then
// the last. With every node down it fails naming them all, and its hint
// does not suggest starting a node (which would make a new cluster).
func TestLaptopFailsOverToAnyNode(t *testing.T) {
	t.Parallel()
	reverse := testwasm.Path(t, "reverse")
	c := newLoopbackCluster(t, 3)
	first := c.members[0]
	first.startNode()
	first.waitUp(60 * time.Second)

	lap := newLaptop(t)
	r := first.cli("pair", "create", "--kind", "device", "--operator", "--json")
	var code struct {
		Code string `json:"code"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &code) != nil {
		t.Fatalf("pair create --kind device: %+v", r)
	}
	if r := lap.cli("device", "pair", "--code", code.Code, "--peer", first.addr, "--name", "laptop"); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	if addr, peers := lap.config(); addr != first.addr || len(peers) > 1 {
		t.Fatalf("paired with a one-node cluster, the laptop recorded %s and %v", addr, peers)
	}
	for _, m := range c.members[1:] {
		m.joinNode(c.pairCode(first), first.addr)
		m.waitUp(90 * time.Second)
	}
	c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))

	// One successful call teaches the laptop every node.
	if r := lap.cli("status"); r.code != 0 {
		t.Fatalf("laptop status: %+v", r)
	}
	var all []string
	for _, m := range c.members {
		all = append(all, m.addr)
	}
	slices.Sort(all)
	addr, peers := lap.config()
	slices.Sort(peers)
	if addr != first.addr || !slices.Equal(peers, all) {
		t.Fatalf("after a call the laptop records %s first and %v; want %s first and %v", addr, peers, first.addr, all)
	}

	// Any one node down: the first address the laptop tries, then the
	// leader, then the third node.
	down := map[string]bool{}
	killedLeader, killedFirstAddr := false, false
	for round := 1; round <= 3; round++ {
		views := c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))
		leader := leaderOf(views)
		firstAddr, _ := lap.config()
		var victim *member
		if round == 1 {
			victim = c.members[0] // the laptop's first address; it created the cluster and led it
		} else if !down[leader] {
			victim = c.byID(leader)
		} else {
			for _, m := range c.members {
				if !down[m.id] {
					victim = m
				}
			}
		}
		down[victim.id] = true
		killedLeader = killedLeader || victim.id == leader
		killedFirstAddr = killedFirstAddr || victim.addr == firstAddr
		t.Logf("round %d: killing %s (%s at %s; leader %v; the laptop's first address %v)",
			round, victim.id, victim.name, victim.addr, victim.id == leader, victim.addr == firstAddr)
		victim.kill()

		if r := lap.cli("nodes", "--json"); r.code != 0 {
			t.Fatalf("round %d: with %s down, laptop 'nodes' failed: %+v", round, victim.name, r)
		}
		in := fmt.Sprintf("round %d", round)
		if j, r := lap.runJob(reverse, in, time.Minute); j.Phase != "completed" || j.Output != reverseString(in) {
			t.Fatalf("round %d: with %s down, laptop job: %+v %+v", round, victim.name, j, r)
		}
		victim.restartNode()
		victim.waitUp(90 * time.Second)
	}
	if len(down) != 3 || !killedLeader || !killedFirstAddr {
		t.Fatalf("killed %d distinct nodes (want 3), the leader: %v, the laptop's first address: %v", len(down), killedLeader, killedFirstAddr)
	}

	// Every node down: one clear error naming them all.
	for _, m := range c.members {
		m.kill()
	}
	r = lap.cli("status")
	if r.code != 1 || !strings.Contains(r.stderr, "hint:") || strings.Contains(r.stderr, "node start") {
		t.Fatalf("all nodes down: %+v", r)
	}
	for _, m := range c.members {
		if !strings.Contains(r.stderr, m.addr) {
			t.Fatalf("all nodes down: the error does not name %s: %s", m.addr, r.stderr)
		}
	}
}
