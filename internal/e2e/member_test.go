package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testbuf"
)

// member is one node process of a multi-node test cluster. Unlike proc it
// may run inside a network namespace, may be started by `node join`, and
// reaches the API with the operator credential of the cluster's first node
// (opDir), since only the node that created the cluster holds one.
type member struct {
	t       *testing.T
	name    string // n1, n2, … in messages
	dataDir string
	addr    string // --listen and the address the CLI dials
	opDir   string // data dir holding the operator credential
	cfgDir  string // if set, CLI calls use this paired device's config dir instead of opDir
	netns   string // run the node and its CLI calls inside this namespace ("" = host)
	id      string // node id, known once the node answered status

	mu    sync.Mutex
	cmd   *exec.Cmd
	log   *testbuf.Buffer
	start int           // offset in log where the current process's output begins
	done  chan struct{} // closed when the current process has exited
	err   error         // its exit status
}

// tail returns the last n lines of the member's output, for failure messages.
func (m *member) tail(n int) string {
	m.mu.Lock()
	log := m.log
	m.mu.Unlock()
	if log == nil {
		return "(never started)"
	}
	lines := strings.Split(strings.TrimRight(log.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// command builds palyra's command line, inside the member's namespace if
// it has one.
func (m *member) command(ctx context.Context, args ...string) *exec.Cmd {
	if m.netns != "" {
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", m.netns, palyraBin}, args...)...)
	}
	return exec.CommandContext(ctx, palyraBin, args...)
}

// spawn starts palyra with args as the member's node process. `ip netns
// exec` execs palyra in place, so the pid is the node's own.
func (m *member) spawn(args ...string) {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		m.t.Fatalf("%s: already running", m.name)
	}
	if m.log == nil {
		m.log = &testbuf.Buffer{}
	}
	fmt.Fprintf(m.log, "---- %s %s\n", time.Now().Format("15:04:05.000"), strings.Join(args, " "))
	m.start = len(m.log.String())
	cmd := m.command(context.Background(), args...)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("%s: %v", m.name, err)
	}
	done := make(chan struct{})
	m.cmd, m.done = cmd, done
	go func() {
		err := cmd.Wait()
		m.mu.Lock()
		m.err = err
		m.mu.Unlock()
		close(done)
	}()
}

// startNode runs `palyra node start` on the member's data dir.
func (m *member) startNode(extra ...string) {
	m.t.Helper()
	m.spawn(append([]string{"--data-dir", m.dataDir, "node", "start", "--listen", m.addr}, extra...)...)
}

// restartNode runs `palyra node start` on the member's data dir as the
// README says, without --listen: the node binds the address it recorded.
func (m *member) restartNode(extra ...string) {
	m.t.Helper()
	m.spawn(append([]string{"--data-dir", m.dataDir, "node", "start"}, extra...)...)
}

// joinNode runs `palyra node join` with code through peer.
func (m *member) joinNode(code, peer string, extra ...string) {
	m.t.Helper()
	m.spawn(append([]string{"--data-dir", m.dataDir, "node", "join", "--code", code, "--peer", peer, "--listen", m.addr}, extra...)...)
}

// exited reports whether the current process has ended, and how.
func (m *member) exited() (bool, error) {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done == nil {
		return true, nil
	}
	select {
	case <-done:
		m.mu.Lock()
		defer m.mu.Unlock()
		return true, m.err
	default:
		return false, nil
	}
}

// kill SIGKILLs the node process and waits until it is gone.
func (m *member) kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd, m.done = nil, nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

func (m *member) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// cli runs one CLI command against this member, as the cluster's operator.
func (m *member) cli(args ...string) result {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cred := []string{"--data-dir", m.opDir}
	if m.cfgDir != "" {
		cred = []string{"--config-dir", m.cfgDir}
	}
	cmd := m.command(ctx, append(append(cred, "--addr", m.addr), args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		m.t.Fatalf("%s: %v", m.name, err)
	}
	return result{code, out.String(), errb.String()}
}

// statusJSON is the part of `palyra status --json` the tests read.
type statusJSON struct {
	NodeID        string `json:"node_id"`
	Address       string `json:"address"`
	LeaderID      string `json:"leader_id"`
	LeaderAddress string `json:"leader_address"`
	RaftState     string `json:"raft_state"`
}

// status returns the member's status, or ok=false if it did not answer.
func (m *member) status() (statusJSON, bool) {
	m.t.Helper()
	r := m.cli("status", "--json")
	var s statusJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
		return s, false
	}
	return s, true
}

// ready reports whether the current process has logged that it is ready.
// The API answers a little earlier, while the node still catches up with
// the log (and the first node registers its operator), so answering alone
// is not enough.
func (m *member) ready() bool {
	m.mu.Lock()
	log, start := m.log, m.start
	m.mu.Unlock()
	return log != nil && strings.Contains(log.String()[start:], `msg="node ready"`)
}

// waitUp waits until the node process is ready and answers status, failing
// at once if it exits. It records the node's id.
func (m *member) waitUp(d time.Duration) {
	m.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if gone, err := m.exited(); gone {
			m.t.Fatalf("%s exited (%v) before it was ready; log:\n%s", m.name, err, m.tail(60))
		}
		if !m.ready() {
			if time.Now().After(deadline) {
				m.t.Fatalf("%s not ready within %s; log:\n%s", m.name, d, m.tail(60))
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if s, ok := m.status(); ok && s.NodeID != "" {
			m.id = s.NodeID
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s did not answer status within %s; log:\n%s", m.name, d, m.tail(60))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeJSON is one entry of `palyra nodes --json`.
type nodeJSON struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	State   string `json:"state"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
	InRaft  bool   `json:"in_raft"`
}

// view is how one member sees the cluster.
type view struct {
	Nodes    []nodeJSON `json:"nodes"`
	ServedBy string     `json:"served_by"`
}

// nodes returns the member's view, or ok=false if it did not answer.
func (m *member) nodes() (view, bool) {
	m.t.Helper()
	r := m.cli("nodes", "--json")
	var v view
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
		return v, false
	}
	return v, true
}

func (v view) node(id string) (nodeJSON, bool) {
	for _, n := range v.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return nodeJSON{}, false
}

// summary counts alive nodes and voters and names the leader ("" if none
// or several).
func (v view) summary() (alive, voters int, leader string) {
	leaders := 0
	for _, n := range v.Nodes {
		if n.State == "alive" {
			alive++
		}
		if n.Voter {
			voters++
		}
		if n.Leader {
			leaders++
			leader = n.ID
		}
	}
	if leaders != 1 {
		leader = ""
	}
	return alive, voters, leader
}

func (v view) String() string {
	var b strings.Builder
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "[%s %s %s voter=%v leader=%v in_raft=%v] ", n.ID, n.Address, n.State, n.Voter, n.Leader, n.InRaft)
	}
	return b.String()
}

// runJob submits a wasm job through the member and polls `job get` (a
// linearizable read) until it ends. It does not use `submit --wait`: the
// watch it relies on reads the serving node's replica without waiting for
// the submission to be applied there (see internal/e2e/DESIGN.md).
func (m *member) runJob(wasmPath, input string, d time.Duration) (job, result) {
	m.t.Helper()
	r := m.cli("job", "submit", "--wasm", wasmPath, "--input", input)
	if r.code != 0 {
		return job{}, r
	}
	id := strings.TrimSpace(r.stdout)
	deadline := time.Now().Add(d)
	for {
		g := m.cli("job", "get", id, "--json")
		var j job
		if g.code == 0 && json.Unmarshal([]byte(g.stdout), &j) == nil {
			switch j.Phase {
			case "completed", "failed", "aborted", "expired":
				return j, g
			}
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("job %s via %s did not end within %s: %+v", id, m.name, d, g)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
