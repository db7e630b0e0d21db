package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// recoverJSON is `palyra node recover --json`.
type recoverJSON struct {
	Recovered bool     `json:"recovered"`
	NodeID    string   `json:"node_id"`
	LastIndex uint64   `json:"last_index"`
	Jobs      int      `json:"jobs"`
	WasVoter  bool     `json:"was_voter"`
	HoldsCA   bool     `json:"holds_ca"`
	Revoked   []string `json:"revoked_nodes"`
	Servers   []struct {
		ID    string `json:"id"`
		Voter bool   `json:"voter"`
	} `json:"servers"`
}

// A voter stopped while the others keep a leader may not be recovered
// (that would split the cluster). Then two of three voters are SIGKILLed
// and their data dirs deleted: the survivor cannot commit. 'palyra node recover' refuses without --yes,
// reports on --dry-run, and with --yes makes the survivor a cluster of
// one: after a restart every job it had committed is there with its
// result, the jobs that were running on the lost nodes run again and
// complete, new jobs are accepted, and a new node joins by pairing.
func TestOutageRecoveryFromOneSurvivor(t *testing.T) {
	t.Parallel()
	reverse, sleep := testwasm.Path(t, "reverse"), testwasm.Path(t, "sleep")
	work := t.TempDir()
	c := newLoopbackCluster(t, 3)
	// One wasm slot per node and no prefetch: three sleeping jobs take one
	// node each, so work is running on the nodes that will be lost.
	slots := []string{"--wasm-slots", "1", "--prefetch", "0"}
	n1, n2, n3 := c.members[0], c.members[1], c.members[2]
	n1.startNode(slots...)
	n1.waitUp(60 * time.Second)
	for _, m := range []*member{n2, n3} {
		m.joinNode(c.pairCode(n1), n1.addr, slots...)
		m.waitUp(90 * time.Second)
	}
	c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))

	// One voter stopped while the other two keep a leader: recovering it
	// would split the cluster in two. It is refused, dry run or not, and
	// changes nothing; the node starts again and rejoins.
	n1.kill()
	c.waitViews("n2 and n3 keep a leader", 60*time.Second, []*member{n2, n3}, agree(2, 3))
	for _, mode := range []string{"--dry-run", "--yes"} {
		r := palyra(t, work, "--data-dir", n1.dataDir, "node", "recover", mode)
		if r.code != 1 || !strings.Contains(r.stderr, "the cluster is not lost") || !strings.Contains(r.stderr, "has a leader") {
			t.Fatalf("node recover %s with a live quorum elsewhere: %+v; want it refused", mode, r)
		}
	}
	n1.startNode(slots...)
	n1.waitUp(90 * time.Second)
	c.waitViews("n1 back after the refused recovery", 90*time.Second, c.members, agree(3, 3))

	outputs := map[string]string{}
	for i := 0; i < 9; i++ {
		in := fmt.Sprintf("job-%d", i)
		outputs[submitVia(t, c.members[i%3], "--wasm", reverse, "--input", in)] = reverseString(in)
	}
	for id, out := range outputs {
		if j := waitEnded(t, n1, id, 2*time.Minute); j.Phase != "completed" || j.Output != out {
			t.Fatalf("job %s: %+v", id, j)
		}
	}
	var sleepers []string
	for i := 0; i < 3; i++ {
		sleepers = append(sleepers, submitVia(t, n1, "--wasm", sleep, "--input", "10s"))
	}
	ranOn := map[string]bool{}
	deadline := time.Now().Add(time.Minute)
	for len(ranOn) < 3 {
		clear(ranOn)
		for _, id := range sleepers {
			if j, _ := getJob(t, n1, id); j.Phase == "running" {
				ranOn[j.NodeID] = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the three sleeping jobs do not run one per node: %v", ranOn)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Two voters are lost for good; the survivor has no quorum. A copy of
	// n2's local operator credential is kept, as a disk left somewhere.
	leftover := t.TempDir()
	if err := os.CopyFS(filepath.Join(leftover, "operator"), os.DirFS(filepath.Join(n2.dataDir, "operator"))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(leftover, "operator", "key.pem"), 0o600); err != nil { // CopyFS leaves 0644
		t.Fatal(err)
	}
	for _, m := range []*member{n2, n3} {
		m.kill()
		os.RemoveAll(m.dataDir)
	}
	if r := n1.cli("job", "submit", "--wasm", reverse, "--input", "no quorum"); r.code == 0 {
		t.Fatalf("a job was accepted by a node that lost its quorum: %+v", r)
	}
	n1.kill()

	if r := palyra(t, work, "--data-dir", n1.dataDir, "node", "recover"); r.code == 0 || !strings.Contains(r.stderr, "--yes") ||
		!strings.Contains(r.stderr, "nothing changed") {
		t.Fatalf("recover without --yes: %+v", r)
	}
	lost := []string{n2.id, n3.id}
	slices.Sort(lost)
	var dry recoverJSON
	mustJSON(t, "node recover --dry-run", palyra(t, work, "--data-dir", n1.dataDir, "node", "recover", "--dry-run", "--json"), &dry)
	slices.Sort(dry.Revoked)
	if dry.Recovered || dry.NodeID != n1.id || len(dry.Servers) != 3 || !dry.WasVoter || !dry.HoldsCA || dry.Jobs < 12 || !slices.Equal(dry.Revoked, lost) {
		t.Fatalf("dry run: %+v (lost %v)", dry, lost)
	}
	var rec recoverJSON
	mustJSON(t, "node recover --yes", palyra(t, work, "--data-dir", n1.dataDir, "node", "recover", "--yes", "--json"), &rec)
	slices.Sort(rec.Revoked)
	if !rec.Recovered || rec.LastIndex != dry.LastIndex || rec.Jobs != dry.Jobs || !slices.Equal(rec.Revoked, lost) {
		t.Fatalf("recover: %+v, dry run said %+v", rec, dry)
	}

	n1.startNode(slots...)
	n1.waitUp(90 * time.Second)
	c.waitViews("the survivor alone: one alive voter, leading", 60*time.Second, []*member{n1}, agree(1, 1))
	for id, out := range outputs {
		if j, ok := getJob(t, n1, id); !ok || j.Phase != "completed" || j.Output != out {
			t.Fatalf("job %s after recovery: %+v (known: %v)", id, j, ok)
		}
	}
	for _, id := range sleepers {
		j := waitEnded(t, n1, id, 3*time.Minute)
		if j.Phase != "completed" || j.Output != "slept 10s" || j.NodeID != n1.id || j.Attempt < 2 {
			t.Fatalf("a job running at the loss, after recovery: %+v", j)
		}
	}
	if j, r := n1.runJob(reverse, "after recovery", time.Minute); j.Phase != "completed" || j.Output != reverseString("after recovery") {
		t.Fatalf("new job after recovery: %+v %+v", j, r)
	}
	// The lost machines' local operator credentials are revoked with
	// their nodes (one administered the rebuilt cluster).
	if r := palyra(t, work, "--data-dir", leftover, "--addr", n1.addr, "job", "list"); r.code == 0 || !strings.Contains(r.stderr, "revoked") {
		t.Fatalf("a lost node's local operator credential after recovery: %+v; want it refused as revoked", r)
	}

	// The cluster grows again by pairing.
	n4 := &member{t: t, name: "n4", dataDir: t.TempDir(), addr: freeUDPAddr(t), opDir: n1.dataDir}
	t.Cleanup(n4.kill)
	n4.joinNode(c.pairCode(n1), n1.addr)
	n4.waitUp(90 * time.Second)
	c.waitViews("the recovered node and a new one", 90*time.Second, []*member{n1, n4}, agree(2, 1))
	if j, r := n4.runJob(reverse, "grown again", time.Minute); j.Phase != "completed" {
		t.Fatalf("job through the new node: %+v %+v", j, r)
	}
}
