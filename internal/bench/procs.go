package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

var pprofPort int

// nodeProc is one `palyra` node process of the benchmark cluster, with an
// API client authenticated as the cluster's operator.
type nodeProc struct {
	name, dir, addr string
	id              string
	cmd             *exec.Cmd
	done            chan struct{}
	logPath         string
	cl              *client.Client
}

// procCluster runs palyra node processes on loopback, each with its own
// data dir under root; the first one created the cluster and holds the
// operator credential.
type procCluster struct {
	bin   string
	root  string
	cred  *identity.Credential
	nodes []*nodeProc
	seq   int
}

func freeAddr() (string, error) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer pc.Close()
	return pc.LocalAddr().String(), nil
}

// newProc prepares a node process with a fresh data dir and port.
func (c *procCluster) newProc() (*nodeProc, error) {
	c.seq++
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("n%d", c.seq)
	p := &nodeProc{name: name, dir: filepath.Join(c.root, name), addr: addr, logPath: filepath.Join(c.root, name+".log")}
	c.nodes = append(c.nodes, p)
	return p, nil
}

// spawn starts palyra with args, its output appended to the node's log.
func (p *nodeProc) spawn(bin string, args ...string) error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if os.Getenv("PALYRA_BENCH_PPROF") != "" { // profile the nodes: 6060, 6061, … in start order
		pprofPort++
		p.cmd.Env = append(os.Environ(), fmt.Sprintf("PALYRA_PPROF=127.0.0.1:%d", 6059+pprofPort), fmt.Sprintf("PALYRA_METRICS_LISTEN=127.0.0.1:%d", 7059+pprofPort))
		fmt.Fprintf(os.Stderr, "  %s: pprof on 127.0.0.1:%d\n", p.name, 6059+pprofPort)
	}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	p.done = done
	go func(cmd *exec.Cmd) { cmd.Wait(); f.Close(); close(done) }(p.cmd)
	return nil
}

func (p *nodeProc) start(bin string) error {
	return p.spawn(bin, "--data-dir", p.dir, "node", "start", "--listen", p.addr)
}

func (p *nodeProc) exited() bool {
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process and waits for it.
func (p *nodeProc) kill() {
	if p.cmd == nil || p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// logTail is the end of the node's log, for error messages.
func (p *nodeProc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-8):], "\n")
}

// waitReady waits until the process logged "node ready" since offset and
// answers Status; it returns an error at once if the process exits.
func (c *procCluster) waitReady(ctx context.Context, p *nodeProc, offset int64, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready:\n%s", p.name, p.logTail())
		}
		b, _ := os.ReadFile(p.logPath)
		if int64(len(b)) > offset && strings.Contains(string(b[offset:]), `msg="node ready"`) {
			if p.cl == nil {
				cl, err := client.New(p.addr, c.cred)
				if err != nil {
					return err
				}
				p.cl = cl
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := p.cl.Node.Status(cctx, connect.NewRequest(&palyrav1.StatusRequest{}))
			cancel()
			if err == nil {
				p.id = resp.Msg.NodeId
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within %s:\n%s", p.name, d, p.logTail())
}

func logSize(p *nodeProc) int64 {
	st, err := os.Stat(p.logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// startFirst creates the cluster.
func (c *procCluster) startFirst(ctx context.Context) error {
	p, err := c.newProc()
	if err != nil {
		return err
	}
	if err := p.start(c.bin); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.cred == nil {
		if cred, err := identity.LoadCredential(node.Layout{Dir: p.dir}.OperatorDir()); err == nil {
			c.cred = cred
		} else if time.Now().After(deadline) || p.exited() {
			return fmt.Errorf("first node made no operator credential: %w\n%s", err, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c.waitReady(ctx, p, 0, 60*time.Second)
}

// join pairs and starts a new node through the first running node.
func (c *procCluster) join(ctx context.Context) (*nodeProc, error) {
	var via *nodeProc
	for _, n := range c.nodes {
		if !n.exited() && n.cl != nil {
			via = n
			break
		}
	}
	if via == nil {
		return nil, errors.New("no running node to pair through")
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := via.cl.Identity.CreatePairing(cctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "node"}))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("pair create via %s: %w", via.name, via.cl.Explain(err))
	}
	p, err := c.newProc()
	if err != nil {
		return nil, err
	}
	if err := p.spawn(c.bin, "--data-dir", p.dir, "node", "join", "--code", resp.Msg.Code, "--peer", via.addr, "--listen", p.addr); err != nil {
		return nil, err
	}
	return p, c.waitReady(ctx, p, 0, 90*time.Second)
}

// running returns the nodes whose process runs.
func (c *procCluster) running() []*nodeProc {
	var out []*nodeProc
	for _, n := range c.nodes {
		if !n.exited() {
			out = append(out, n)
		}
	}
	return out
}

// close kills every process and closes the clients.
func (c *procCluster) close() {
	for _, n := range c.nodes {
		n.kill()
		if n.cl != nil {
			n.cl.Close()
		}
	}
}

// listNodes asks p for its view of the cluster, with a short timeout.
func listNodes(ctx context.Context, p *nodeProc, d time.Duration) ([]*palyrav1.NodeInfo, error) {
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := p.cl.Node.ListNodes(cctx, connect.NewRequest(&palyrav1.ListNodesRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.Nodes, nil
}

// healthy waits until every running node sees want alive voters, all
// alive, and the same leader; it returns that leader's process.
func (c *procCluster) healthy(ctx context.Context, want int, d time.Duration) (*nodeProc, error) {
	deadline := time.Now().Add(d)
	var why string
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		leader, ok := "", true
		for _, p := range c.running() {
			ns, err := listNodes(ctx, p, time.Second)
			if err != nil {
				why, ok = fmt.Sprintf("%s: %v", p.name, err), false
				break
			}
			voters, l := 0, ""
			for _, n := range ns {
				if n.Voter && n.State == "alive" {
					voters++
				}
				if n.Leader {
					l = n.Id
				}
			}
			if voters != want || l == "" || (leader != "" && l != leader) {
				why, ok = fmt.Sprintf("%s sees %d alive voters, leader %q", p.name, voters, l), false
				break
			}
			leader = l
		}
		if ok {
			for _, p := range c.running() {
				if p.id == leader {
					return p, nil
				}
			}
			why = "leader " + leader + " is not one of our running processes"
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("cluster not healthy within %s: %s", d, why)
}

// formCluster starts three palyra processes in a fresh temp dir, the
// first creating the cluster and the others joining by pairing; done
// kills them and removes the dir.
func formCluster(ctx context.Context, bin, prefix string) (c *procCluster, done func(), err error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, nil, fmt.Errorf("%w (run 'make build' first)", err)
	}
	root, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, err
	}
	c = &procCluster{bin: bin, root: root}
	done = func() { c.close(); os.RemoveAll(root) }
	defer func() {
		if err != nil {
			done()
		}
	}()
	if err = c.startFirst(ctx); err != nil {
		return nil, nil, err
	}
	for range 2 {
		if _, err = c.join(ctx); err != nil {
			return nil, nil, err
		}
	}
	return c, done, nil
}
