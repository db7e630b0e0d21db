package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/node"
	ncluster "github.com/palyra-mesh/palyra/node/cluster"
)

// joinNode pairs a new node through c's node and starts it in-process,
// running (node.Wait) as 'palyra node start' does, so that a leave stops
// it. done is closed once it has stopped.
func (c *cluster) joinNode() (n *node.Node, done chan error) {
	c.t.Helper()
	return c.joinNodeWith(false)
}

// joinNodeWith is joinNode; with localOperator the node's data dir gets a
// local operator credential, as 'palyra node join' makes one.
func (c *cluster) joinNodeWith(localOperator bool) (n *node.Node, done chan error) {
	c.t.Helper()
	r := c.cli("pair", "create", "--kind", "node")
	raw := regexp.MustCompile(`P1-[A-Z0-9-]+`).FindString(r.stdout + r.stderr)
	code, err := pairing.Parse(raw)
	if r.code != 0 || err != nil {
		c.t.Fatalf("pair create: %+v (%v)", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	peer := c.node.Addr()
	paired, err := client.PairMember(ctx, peer, code, client.PairOptions{LocalOperator: localOperator})
	if err != nil {
		c.t.Fatal(err)
	}
	cred, pr := paired.Credential, paired.Response
	dir := c.t.TempDir()
	if paired.Operator != nil {
		if err := node.SaveLocalOperator(dir, paired.Operator); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := node.PrepareJoin(dir, cred, pr.ClusterName, append([]string{peer}, pr.Peers...), pr.DataKey); err != nil {
		c.t.Fatal(err)
	}
	n, err = node.Start(context.Background(), node.Config{
		DataDir: dir, Listen: "127.0.0.1:0", Fast: true, WasmSlots: 1, BrowserSlots: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WasmCacheDir: sharedWasmCache,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- n.Wait(wctx); close(done) }()
	c.t.Cleanup(func() { stop(); <-done })
	return n, done
}

// waitCluster waits until every node sees want nodes alive, want voters,
// a leader, and every voter gossiping that it holds the CA key.
func waitCluster(t *testing.T, nodes []*node.Node, want int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok := true
		for _, n := range nodes {
			alive, voters, holders, leader := 0, 0, 0, false
			for _, m := range n.Cluster().Members() {
				if m.State == ncluster.StateAlive {
					alive++
				}
				if m.Voter {
					voters++
				}
				if m.Voter && m.Labels["palyra.ca"] != "" {
					holders++
				}
				leader = leader || m.Leader
			}
			ok = ok && alive == want && voters == want && holders == want && leader
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d alive voters holding the CA key", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// 'node leave' answers and exits 0 (the node used to close its API before
// the Leave call's answer was sent, and the CLI failed with H3_NO_ERROR),
// and removing the node that left does not claim the CA is lost while the
// two other voters still hold its key.
func TestNodeLeaveThenRemove(t *testing.T) {
	c := startNodeWith(t, node.Config{})
	second, _ := c.joinNode()
	third, thirdDone := c.joinNode()
	waitCluster(t, []*node.Node{c.node, second, third}, 3)

	// Removing a node that runs is refused with the command that makes it
	// leave, runnable as it stands: with the caller's --data-dir.
	if r := c.cli("node", "remove", third.ID()); r.code == 0 || !strings.Contains(r.stderr, "'palyra --data-dir "+c.dir+" --addr "+third.Addr()+" node leave'") {
		t.Fatalf("node remove of a running node: %+v", r)
	}
	// From a paired device, the node to leave is named: its recorded
	// address is just the last node that answered (a trial's leader left).
	cfg := filepath.Join(t.TempDir(), "laptop")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr()); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	if r := device(t, cfg, "node", "leave"); r.code != 2 || !strings.Contains(r.stderr, "name it with --addr HOST:PORT") || !strings.Contains(r.stderr, c.node.Addr()) {
		t.Fatalf("node leave from a device without --addr: %+v", r)
	}
	r := runCLI(t, "--data-dir", c.dir, "--addr", third.Addr(), "node", "leave")
	if r.code != 0 || !strings.Contains(r.stdout, "node "+third.ID()+" at "+third.Addr()+" left the cluster") || r.stderr != "" {
		t.Fatalf("node leave: %+v", r)
	}
	select {
	case err := <-thirdDone:
		if err != nil {
			t.Logf("the node that left stopped with: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the node that left did not stop")
	}

	r = c.cli("node", "remove", third.ID())
	if r.code != 0 || strings.Contains(r.stderr, "no other live node holds it") || !strings.Contains(r.stdout, "still hold it") ||
		!strings.Contains(r.stdout, c.node.ID()) || !strings.Contains(r.stdout, second.ID()) {
		t.Fatalf("remove of the node that left: %+v", r)
	}
	// Its disk still holds the CA key (a trial forged an operator's
	// certificate with it): the removal says to rotate the CA.
	if !strings.Contains(r.stderr, "its disk still holds the CA key") || !strings.Contains(r.stderr, "palyra ca rotate") {
		t.Fatalf("remove of a node that held the CA key does not say to rotate the CA: %+v", r)
	}
}

// The first 'node start' on a port something else holds fails before it
// makes a cluster: nothing is initialised (a retry with another --listen,
// or a 'node join' here, starts clean) and the error names the address
// once and the fix.
func TestFirstStartOnABusyPortInitialisesNothing(t *testing.T) {
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.LocalAddr().String()
	dir := t.TempDir()
	r := runCLI(t, "--data-dir", dir, "node", "start", "--listen", addr, "--browser-slots", "-1")
	var errLine string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "error: ") {
			errLine = l
		}
	}
	if r.code != 1 || strings.Count(errLine, addr) != 1 || !strings.Contains(errLine, "cannot listen on "+addr) ||
		!strings.Contains(errLine, "--listen") || strings.Contains(r.stderr, "a new cluster") {
		t.Fatalf("first start on a busy port: %+v", r)
	}
	l := node.Layout{Dir: dir}
	if _, err := l.ReadState(); !errors.Is(err, node.ErrNoState) {
		t.Fatalf("node.json after a failed first start: %v", err)
	}
	for _, d := range []string{l.CADir(), l.NodeCredDir(), l.OperatorDir()} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s exists after a failed first start (%v)", d, err)
		}
	}
}

// Every flag's help shows one default: a flag whose usage states its
// default in words has it as DefaultText, not urfave's "(default: 0)"
// beside it.
func TestHelpShowsOneDefaultPerFlag(t *testing.T) {
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	var walk func(path string, flags []ucli.Flag, cmds []*ucli.Command)
	walk = func(path string, flags []ucli.Flag, cmds []*ucli.Command) {
		for _, f := range flags {
			if s := ucli.FlagStringer(f); strings.Count(s, "(default") > 1 {
				t.Errorf("%s: %s", path, s)
			}
		}
		for _, c := range cmds {
			walk(path+" "+c.Name, c.Flags, c.Subcommands)
		}
	}
	walk("palyra", app.Flags, app.Commands)
}

// --print-config shows what the node runs with, not the flags' zeros: the
// address recorded in the data dir, 2 × CPUs wasm slots, 2 browser slots,
// 3 target voters.
func TestPrintConfigShowsResolvedDefaults(t *testing.T) {
	c := startNode(t)
	r := runCLI(t, "--data-dir", c.dir, "node", "start", "--print-config")
	if r.code != 0 {
		t.Fatalf("print-config: %+v", r)
	}
	for _, want := range []string{
		`listen = "` + c.node.Addr() + `"`, "recorded in the data dir",
		fmt.Sprintf("wasm-slots = %d ", 2*runtime.NumCPU()),
		"browser-slots = 2 ", "target-voters = 3 ", `cert-ttl = "24h0m0s"`, `network = "lan"`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("print-config lacks %q:\n%s", want, r.stdout)
		}
	}
}

// node drain and node eligibility take --json, as every command that
// prints does.
func TestDrainAndEligibilityJSON(t *testing.T) {
	c := startNode(t)
	id := c.node.ID()
	var out struct {
		NodeID   string `json:"node_id"`
		Eligible bool   `json:"eligible"`
		Draining bool   `json:"draining"`
	}
	r := c.cli("node", "drain", id, "--json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.NodeID != id || !out.Draining || out.Eligible {
		t.Fatalf("node drain --json: %+v → %+v", r, out)
	}
	r = c.cli("node", "eligibility", id, "--enable", "--json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.NodeID != id || out.Draining || !out.Eligible {
		t.Fatalf("node eligibility --enable --json: %+v → %+v", r, out)
	}
	if r := c.cli("node", "drain", id, "--deadline", "-5s"); r.code == 0 || !strings.Contains(r.stderr, "--deadline -5s is negative") {
		t.Fatalf("a negative drain deadline: %+v", r)
	}
	// The text says what the deadline does (it was not mentioned).
	if r := c.cli("node", "drain", id, "--deadline", "2m"); r.code != 0 || !strings.Contains(r.stdout, "what still runs there after 2m0s moves elsewhere") {
		t.Fatalf("drain --deadline: %+v", r)
	}
	if r := c.cli("node", "eligibility", id, "--enable"); r.code != 0 {
		t.Fatalf("eligibility --enable: %+v", r)
	}
}

// Confirmation-only commands take --json too (secret delete here; hook
// unbind, browser close and skill trust remove print the same shape).
func TestSecretDeleteJSON(t *testing.T) {
	c := startNode(t)
	f := filepath.Join(t.TempDir(), "v")
	os.WriteFile(f, []byte("s3cret"), 0o600)
	if r := c.cli("secret", "set", "tok", "--from-file", f); r.code != 0 {
		t.Fatalf("secret set: %+v", r)
	}
	var out struct{ Deleted string }
	r := c.cli("secret", "delete", "tok", "--json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Deleted != "tok" {
		t.Fatalf("secret delete --json: %+v", r)
	}
}

// The node that created the cluster, lost for good: removed through
// another node, its local operator credential (whose key is on the lost
// machine) is revoked with it, and a node that joined through it starts
// again: it rejoins through the members it knew, not only through the
// node it first joined through (it tried that one alone for two minutes
// and exited: no node that joined through the first could ever restart).
func TestLosingTheFirstNodeForGood(t *testing.T) {
	c := startNodeWith(t, node.Config{})
	second, _ := c.joinNode()
	third, _ := c.joinNode()
	waitCluster(t, []*node.Node{c.node, second, third}, 3)
	first := c.node.ID()
	var founderOp string
	var list struct {
		Devices []struct {
			ID, Name string
			Revoked  bool
		}
	}
	devices := func(r result) {
		t.Helper()
		list.Devices = nil
		if err := json.Unmarshal([]byte(r.stdout), &list); r.code != 0 || err != nil {
			t.Fatalf("device list: %+v (%v)", r, err)
		}
	}
	devices(c.cli("device", "list", "--json"))
	for _, d := range list.Devices {
		if d.Name == "local operator" {
			founderOp = d.ID
		}
	}
	if founderOp == "" {
		t.Fatal("no local operator of the first node in device list")
	}
	// An operator laptop, paired before the loss.
	laptop := filepath.Join(t.TempDir(), "laptop")
	if r := device(t, laptop, "device", "pair", "--code", c.pairCode("device", "--operator"), "--peer", c.node.Addr(), "--name", "laptop"); r.code != 0 {
		t.Fatalf("pair the laptop: %+v", r)
	}
	c.node.Close()

	secondDir := second.Layout().Dir
	viaSecond := func(args ...string) result {
		return device(t, laptop, append([]string{"--addr", second.Addr() + "," + third.Addr()}, args...)...)
	}
	var r result
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		// Until gossip declares it dead (and a new leader is elected).
		if r = viaSecond("node", "remove", first); r.code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if r.code != 0 || !strings.Contains(r.stdout, founderOp) {
		t.Fatalf("node remove of the first node (its local operator %s must be revoked too): %+v", founderOp, r)
	}
	if r := viaSecond("node", "remove", first); r.code != 0 || !strings.Contains(r.stdout, "was removed already: nothing left to do") {
		t.Fatalf("removing the removed node again: %+v", r)
	}
	for _, args := range [][]string{{"node", "eligibility", first, "--enable"}, {"node", "drain", first}} {
		if r := viaSecond(args...); r.code == 0 || !strings.Contains(r.stderr, "was removed from the cluster") {
			t.Fatalf("%v on the removed node: %+v", args, r)
		}
	}
	devices(viaSecond("device", "list", "--json"))
	for _, d := range list.Devices {
		if d.ID == founderOp && !d.Revoked {
			t.Fatalf("the first node's local operator is not revoked: %+v", list.Devices)
		}
	}

	// The second node joined through the first (its only seed) and restarts.
	second.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	back, err := node.Start(ctx, node.Config{
		DataDir: secondDir, Fast: true, WasmSlots: 1, BrowserSlots: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WasmCacheDir: sharedWasmCache,
	})
	if err != nil {
		t.Fatalf("restarting a node whose only seed was removed: %v", err)
	}
	t.Cleanup(func() { back.Close() })
	waitCluster(t, []*node.Node{back, third}, 2)
}
