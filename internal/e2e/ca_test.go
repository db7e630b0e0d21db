package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
)

// caStatus is the part of `palyra ca status --json` the tests read.
type caStatus struct {
	Roots []struct {
		Fingerprint string   `json:"fingerprint"`
		State       string   `json:"state"`
		Holders     []string `json:"holders"`
	} `json:"roots"`
	Nodes []struct {
		ID       string   `json:"id"`
		Voter    bool     `json:"voter"`
		State    string   `json:"state"`
		Holds    []string `json:"holds"`
		CertRoot string   `json:"cert_root"`
	} `json:"nodes"`
}

func (m *member) caStatus() (caStatus, error) {
	r := m.cli("ca", "status", "--json")
	var st caStatus
	if r.code != 0 {
		return st, fmt.Errorf("ca status via %s: %+v", m.name, r)
	}
	return st, json.Unmarshal([]byte(r.stdout), &st)
}

// nodeCert is the certificate a member's node presents now, read from its
// data dir.
func nodeCert(m *member) (*identity.Credential, error) {
	return identity.LoadCredential(node.Layout{Dir: m.dataDir}.NodeCredDir())
}

// rootOf is the fingerprint of the root in cred's trust that issued its
// certificate ("" if none).
func rootOf(cred *identity.Credential) string {
	if r := identity.IssuingRoot(cred.Leaf, cred.RootCerts); r != nil {
		return identity.Fingerprint(r.Raw)
	}
	return ""
}

// pairDevice pairs a device (operator if asked) through peer with a code
// made through via, into a new config dir, and returns the dir.
func pairDevice(t *testing.T, via, peer *member, operator bool) string {
	t.Helper()
	args := []string{"pair", "create", "--kind", "device", "--json"}
	if operator {
		args = append(args, "--operator")
	}
	r := via.cli(args...)
	var out struct{ Code string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
		t.Fatalf("pair create --kind device via %s: %+v", via.name, r)
	}
	dir := t.TempDir()
	if r := runAs(dir, peer.addr, "device", "pair", "--code", out.Code, "--peer", peer.addr); r.code != 0 {
		t.Fatalf("device pair through %s: %+v", peer.name, r)
	}
	return dir
}

// runAs runs one CLI command as the device in cfgDir against addr, without
// failing the test (for background callers).
func runAs(cfgDir, addr string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, palyraBin, append([]string{"--config-dir", cfgDir, "--addr", addr}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		errb.WriteString(err.Error())
	}
	return result{code, out.String(), errb.String()}
}

// callLoop runs `status` against each address in turn, as each credential
// (a config dir, or "data:DIR" for a node data dir's operator), one new
// process and connection per call, until stop is closed, and records every
// failure. It is the "no failed call" witness.
type callLoop struct {
	mu       sync.Mutex
	calls    int
	failures []string
	stop     chan struct{}
	done     chan struct{}
}

func startCalls(creds []string, addrs func() []string) *callLoop {
	l := &callLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			as := addrs()
			addr := as[i%len(as)]
			for _, cred := range creds {
				var r result
				if dir, ok := strings.CutPrefix(cred, "data:"); ok {
					r = runData(dir, addr, "status")
				} else {
					r = runAs(cred, addr, "status")
				}
				l.mu.Lock()
				l.calls++
				if r.code != 0 {
					l.failures = append(l.failures, fmt.Sprintf("%s via %s at %s: %s", cred, addr, time.Now().Format("15:04:05.000"), strings.TrimSpace(r.stderr)))
				}
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func runData(dataDir, addr string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, palyraBin, append([]string{"--data-dir", dataDir, "--addr", addr}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return result{code, out.String(), errb.String()}
}

func (l *callLoop) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// finish stops the loop and fails the test if any call failed.
func (l *callLoop) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	<-l.done
	if len(l.failures) > 0 {
		t.Fatalf("%d of %d calls failed; first: %s", len(l.failures), l.calls, l.failures[0])
	}
	t.Logf("%d calls, none failed", l.calls)
}

// waitVotersHoldKey waits until, as via sees it, exactly the live voters
// hold the active root's key.
func waitVotersHoldKey(t *testing.T, via *member) {
	t.Helper()
	waitUntil(t, "every voter (and no other node) to hold the CA key", time.Minute, func() error {
		st, err := via.caStatus()
		if err != nil {
			return err
		}
		if len(st.Roots) != 1 {
			return fmt.Errorf("roots %+v", st.Roots)
		}
		want := st.Roots[0].Fingerprint[:12]
		for _, n := range st.Nodes {
			if n.State == "alive" && n.Voter != slices.Contains(n.Holds, want) {
				return fmt.Errorf("node %s voter=%v holds %v", n.ID, n.Voter, n.Holds)
			}
		}
		return nil
	})
}

// The node that created the cluster is SIGKILLed and its data dir deleted.
// Afterwards a new node pairs through another node (and becomes a voter,
// taking the CA key), a device pairs through the new node, every survivor
// renews its certificate several times (30 s lifetimes), jobs run, and the
// operator's device, paired before the loss, never sees a call fail.
func TestFirstNodeLostWithItsDataDir(t *testing.T) {
	t.Parallel()
	const ttl = "30s"
	reverse := testwasm.Path(t, "reverse")
	c := newLoopbackCluster(t, 4)
	n1, n2, n3, n4 := c.members[0], c.members[1], c.members[2], c.members[3]
	n1.startNode("--cert-ttl", ttl)
	n1.waitUp(60 * time.Second)
	for _, m := range []*member{n2, n3} {
		m.joinNode(c.pairCode(n1), n1.addr, "--cert-ttl", ttl)
		m.waitUp(90 * time.Second)
	}
	c.waitViews("3 alive voters", 90*time.Second, []*member{n1, n2, n3}, agree(3, 3))
	// Settled: every voter holds the CA key (a voter fetches it within a
	// second or so of its promotion; losing the only holder before that
	// would lose the key).
	waitVotersHoldKey(t, n1)

	// The operator's laptop, paired before the loss, makes every call from
	// now on; a background caller uses it through the survivors throughout.
	opDev := pairDevice(t, n1, n2, true)
	for _, m := range c.members {
		m.cfgDir = opDev
	}
	survivors := []*member{n2, n3}
	var survMu sync.Mutex
	calls := startCalls([]string{opDev}, func() []string {
		survMu.Lock()
		defer survMu.Unlock()
		var out []string
		for _, m := range survivors {
			out = append(out, m.addr)
		}
		return out
	})

	n1.kill()
	if err := os.RemoveAll(n1.dataDir); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("killed %s (%s), the node that created the cluster, and deleted its data dir", n1.name, n1.id)
	c.waitViews("a leader among the survivors", 60*time.Second, survivors, func(views []view) error {
		for _, v := range views {
			if _, _, l := v.summary(); l == "" || l == n1.id {
				return fmt.Errorf("%s reports leader %q", v.ServedBy, l)
			}
		}
		return agree(2, 3)(views)
	})
	if j, r := n2.runJob(reverse, "after the loss", time.Minute); j.Phase != "completed" || j.Output != reverseString("after the loss") {
		t.Fatalf("job after the first node's loss: %+v %+v", j, r)
	}

	// A new node pairs through n3 with a code made through n2, and takes
	// the dead node's seat, and the CA key with it.
	n4.joinNode(c.pairCode(n2), n3.addr, "--cert-ttl", ttl)
	n4.waitUp(90 * time.Second)
	survMu.Lock()
	survivors = append(survivors, n4)
	survMu.Unlock()
	c.waitViews("the new node a voter", 90*time.Second, survivors, agree(3, 3))
	waitVotersHoldKey(t, n4)

	// A device pairs through the newest node and works through another.
	dev := pairDevice(t, n3, n4, false)
	if r := runAs(dev, n2.addr, "status"); r.code != 0 {
		t.Fatalf("the new device through %s: %+v", n2.name, r)
	}

	// Every survivor renews its certificate, twice at least, after the loss.
	seen := map[*member]map[string]bool{}
	waitUntil(t, "every survivor to renew its certificate twice", 3*time.Minute, func() error {
		for _, m := range survivors {
			cred, err := nodeCert(m)
			if err != nil {
				return err
			}
			if seen[m] == nil {
				seen[m] = map[string]bool{}
			}
			if cred.Leaf.NotBefore.Add(time.Minute).After(killed) { // issued after the kill (NotBefore is backdated 1m)
				seen[m][cred.Leaf.SerialNumber.String()] = true
			}
		}
		for _, m := range survivors {
			if len(seen[m]) < 2 {
				return fmt.Errorf("%s renewed %d times since the kill", m.name, len(seen[m]))
			}
		}
		return nil
	})

	for _, m := range survivors {
		if j, r := m.runJob(reverse, "still "+m.name, time.Minute); j.Phase != "completed" {
			t.Fatalf("job via %s at the end: %+v %+v", m.name, j, r)
		}
	}
	if calls.count() < 20 {
		t.Fatalf("only %d background calls were made", calls.count())
	}
	calls.finish(t)
}

// `palyra ca rotate` on a running three-node cluster: the operator (its
// data-dir credential, which its node renews) and a paired device call
// every node all along, each call a new process and connection, and none
// fails; every node, the operator and the device end up on the new root
// with no restart, the voters hold only its key, and the old root is
// dropped after the overlap.
func TestCARotateOnARunningCluster(t *testing.T) {
	t.Parallel()
	reverse := testwasm.Path(t, "reverse")
	c := newLoopbackCluster(t, 3)
	c.form()
	c.waitViews("3 alive voters", 90*time.Second, c.members, agree(3, 3))
	n1, n2, n3 := c.members[0], c.members[1], c.members[2]
	dev := pairDevice(t, n1, n2, false)
	var addrs []string
	for _, m := range c.members {
		addrs = append(addrs, m.addr)
	}
	calls := startCalls([]string{"data:" + n1.dataDir, dev}, func() []string { return addrs })
	waitUntil(t, "calls before the rotation", time.Minute, func() error {
		if calls.count() < 10 {
			return errString("not yet")
		}
		return nil
	})

	r := n3.cli("ca", "rotate", "--overlap", "20s", "--json")
	var rot struct {
		OldRoot   string `json:"old_root"`
		NewRoot   string `json:"new_root"`
		Activated bool   `json:"activated"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rot) != nil || !rot.Activated || rot.NewRoot == "" || rot.NewRoot == rot.OldRoot {
		t.Fatalf("ca rotate: %+v", r)
	}
	t.Logf("rotated %s → %s", rot.OldRoot[:12], rot.NewRoot[:12])

	waitUntil(t, "everyone on the new root and the old root dropped", 2*time.Minute, func() error {
		for _, m := range c.members {
			cred, err := nodeCert(m)
			if err != nil {
				return err
			}
			if rootOf(cred) != rot.NewRoot {
				return fmt.Errorf("%s's certificate is not from the new root yet", m.name)
			}
		}
		op, err := identity.LoadCredential(node.Layout{Dir: n1.dataDir}.OperatorDir())
		if err != nil || rootOf(op) != rot.NewRoot {
			return fmt.Errorf("operator credential not on the new root yet (%v)", err)
		}
		d, err := identity.LoadCredential(dev + "/credential")
		if err != nil || rootOf(d) != rot.NewRoot || len(d.RootCerts) != 1 {
			return fmt.Errorf("device credential not on the new root alone yet (%v)", err)
		}
		st, err := n2.caStatus()
		if err != nil {
			return err
		}
		if len(st.Roots) != 1 || st.Roots[0].Fingerprint != rot.NewRoot {
			return fmt.Errorf("roots %+v", st.Roots)
		}
		for _, n := range st.Nodes {
			if !slices.Equal(n.Holds, []string{rot.NewRoot[:12]}) || n.CertRoot != rot.NewRoot[:12] {
				return fmt.Errorf("node %s holds %v, certificate from %s", n.ID, n.Holds, n.CertRoot)
			}
		}
		return nil
	})
	// No restart: every node is still the process it was.
	for _, m := range c.members {
		if gone, err := m.exited(); gone {
			t.Fatalf("%s exited (%v)", m.name, err)
		}
	}
	before := calls.count()
	waitUntil(t, "more calls under the new root alone", time.Minute, func() error {
		if calls.count() < before+10 {
			return errString("not yet")
		}
		return nil
	})
	for _, m := range c.members {
		if j, r := m.runJob(reverse, "rotated "+m.name, time.Minute); j.Phase != "completed" {
			t.Fatalf("job via %s after the rotation: %+v %+v", m.name, j, r)
		}
	}
	calls.finish(t)
}
