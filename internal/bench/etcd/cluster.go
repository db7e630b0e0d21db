package main

import (
	"bytes"
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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// member is one etcd process of the benchmark cluster.
type member struct {
	name      string
	clientURL string // http://127.0.0.1:PORT, what the load generator dials
	peerURL   string
	dataDir   string
	logPath   string
	cmd       *exec.Cmd
	exited    chan struct{} // closed when the process has been reaped
	waitErr   error         // valid once exited is closed
}

// cluster is a set of etcd members on loopback, all under one temp dir.
type cluster struct {
	dir     string
	members []*member
}

// freePorts asks the kernel for n distinct free loopback ports. All
// listeners are held until every port is known, so the n are distinct;
// another process could still take one before etcd binds it, which
// startCluster answers by retrying with fresh ports.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startCluster starts size etcd members on loopback under a new temp dir
// and waits until they agree on a leader and accept a write. On error
// everything it started is stopped and removed. A start that fails
// because a member exited early (a port taken between freePorts and
// etcd's bind) is retried with fresh ports, up to three times.
func startCluster(ctx context.Context, etcdBin string, size int) (*cluster, error) {
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		c, early, err := tryStartCluster(ctx, etcdBin, size)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if !early || ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "etcd bench: start attempt %d failed (%v); retrying with new ports\n", attempt, err)
	}
	return nil, lastErr
}

// tryStartCluster makes one attempt. early reports that a member exited
// before the cluster became healthy, the case worth a retry.
func tryStartCluster(ctx context.Context, etcdBin string, size int) (c *cluster, early bool, err error) {
	dir, err := os.MkdirTemp("", "palyra-etcd-bench-")
	if err != nil {
		return nil, false, err
	}
	c = &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
			c = nil
		}
	}()
	ports, err := freePorts(2 * size)
	if err != nil {
		return c, false, err
	}
	var initial []string
	for i := range size {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			exited:    make(chan struct{}),
		}
		m.dataDir = filepath.Join(dir, m.name)
		m.logPath = filepath.Join(dir, m.name+".log")
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL)
	}
	token := fmt.Sprintf("palyra-bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	for _, m := range c.members {
		if err := m.start(etcdBin, strings.Join(initial, ","), token); err != nil {
			return c, false, err
		}
	}
	if err := c.waitHealthy(ctx, 30*time.Second); err != nil {
		for _, m := range c.members {
			select {
			case <-m.exited:
				return c, true, fmt.Errorf("%s exited (%v): %s", m.name, m.waitErr, m.logTail())
			default:
			}
		}
		return c, false, err
	}
	return c, false, nil
}

// start launches the member's etcd process with production defaults (WAL
// fsync on, default heartbeat and election timeouts, default snapshot
// count); only names, URLs, the data dir and logging are set.
func (m *member) start(etcdBin, initialCluster, token string) error {
	logf, err := os.Create(m.logPath)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy of the descriptor
	m.cmd = exec.Command(etcdBin,
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.clientURL,
		"--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", initialCluster,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", token,
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
	)
	m.cmd.Env = cleanEnv()
	m.cmd.Stdout = logf
	m.cmd.Stderr = logf
	// Pdeathsig is the backstop for a bench killed with SIGKILL, when no
	// deferred cleanup runs: the kernel kills the member when its parent
	// goes away. Setpgid keeps a terminal's Ctrl-C from reaching the
	// members all at once: the bench gets it and stops them in turn.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.name, err)
	}
	go func() {
		m.waitErr = m.cmd.Wait()
		close(m.exited)
	}()
	return nil
}

// cleanEnv is the bench's environment without ETCD_* variables, which etcd
// would read as flags and which could change what is measured.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") && !strings.HasPrefix(kv, "ETCDCTL_") {
			env = append(env, kv)
		}
	}
	return env
}

// logTail is the last lines of the member's log, for error messages.
func (m *member) logTail() string {
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b = bytes.TrimSpace(b)
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// waitHealthy polls every member's Status until all name the same leader,
// then writes one key through each member.
func (c *cluster) waitHealthy(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   c.endpoints(),
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer cl.Close()
	var last error
	for {
		if err := c.checkExited(); err != nil {
			return err
		}
		if last = c.healthy(ctx, cl); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd cluster not healthy after %s: %w", limit, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *cluster) healthy(ctx context.Context, cl *clientv3.Client) error {
	var leader uint64
	for _, m := range c.members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cl.Status(sctx, m.clientURL)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if st.Leader == 0 {
			return fmt.Errorf("%s has no leader", m.name)
		}
		if leader != 0 && st.Leader != leader {
			return fmt.Errorf("members disagree on the leader")
		}
		leader = st.Leader
	}
	for _, m := range c.members {
		one, err := clientv3.New(clientv3.Config{
			Endpoints: []string{m.clientURL}, DialTimeout: time.Second, Logger: zap.NewNop(),
		})
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = one.Put(pctx, "palyra-bench/ready/"+m.name, "1")
		cancel()
		one.Close()
		if err != nil {
			return fmt.Errorf("put via %s: %w", m.name, err)
		}
	}
	return nil
}

func (c *cluster) checkExited() error {
	for _, m := range c.members {
		select {
		case <-m.exited:
			return fmt.Errorf("%s exited (%v): %s", m.name, m.waitErr, m.logTail())
		default:
		}
	}
	return nil
}

func (c *cluster) endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.clientURL
	}
	return eps
}

// stop stops the members one at a time, SIGTERM then, after 5 s, SIGKILL,
// and removes the temp dir. One at a time because etcd 3.4 members sent
// SIGTERM together can stall for seconds (a stopping leader tries to hand
// leadership to a follower that is stopping too); in turn, each exits in
// milliseconds. Safe to call more than once.
func (c *cluster) stop() error {
	for _, m := range c.members {
		if m.cmd == nil || m.cmd.Process == nil {
			continue
		}
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(5 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	if c.dir == "" {
		return nil
	}
	err := os.RemoveAll(c.dir)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		c.dir = ""
		return nil
	}
	return err
}
