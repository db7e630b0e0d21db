package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// signal sends sig to the node process (SIGSTOP freezes it: its peers
// hear nothing, exactly as after a power cut, but nothing closes).
func (m *member) signal(sig syscall.Signal) {
	m.t.Helper()
	m.mu.Lock()
	cmd := m.cmd
	m.mu.Unlock()
	if cmd == nil {
		m.t.Fatalf("%s is not running", m.name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		m.t.Fatalf("signal %s: %v", m.name, err)
	}
}

// A leader that stops answering without closing anything (frozen here;
// SIGKILLed or powered off is the same to its peers: QUIC notices only at
// its 30 s idle timeout) must not hold what followers forwarded to it: a
// linearizable read through a follower, sent while the follower still
// takes the frozen node for its leader, goes to the new leader as soon as
// one is elected. It used to hang until QUIC's idle timeout (30 s), and
// the workers' results stalled the same way.
func TestForwardsMoveOnFromAFrozenLeader(t *testing.T) {
	t.Parallel()
	reverse := testwasm.Path(t, "reverse")
	c := newLoopbackCluster(t, 3)
	c.form()
	c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))
	if j, r := c.members[0].runJob(reverse, "before", time.Minute); j.Phase != "completed" {
		t.Fatalf("job before the freeze: %+v %+v", j, r)
	}
	// The leader now (leadership can move while the cluster forms).
	views := c.waitViews("one leader on every node", 30*time.Second, c.members, agree(3, 3))
	leader := c.byID(leaderOf(views))
	follower := c.follower(leader)
	t.Logf("freezing the leader %s (%s); reading through %s", leader.name, leader.id, follower.name)

	leader.signal(syscall.SIGSTOP)
	t.Cleanup(func() {
		if leader.running() {
			leader.signal(syscall.SIGCONT)
		}
	})
	start := time.Now()
	// Forwarded for a read index at once. 8 s: a new leader takes about a
	// second here; the forward to the frozen one would hang for 30 s.
	r := follower.cli("--call-timeout", "8s", "job", "list", "--json")
	if r.code != 0 {
		t.Fatalf("a read through %s while the leader %s froze failed after %s: exit %d, %s",
			follower.name, leader.name, time.Since(start).Round(time.Millisecond), r.code, r.stderr)
	}
	t.Logf("read through %s answered %s after the freeze", follower.name, time.Since(start).Round(time.Millisecond))
	j, jr := follower.runJob(reverse, "while frozen", time.Minute)
	if j.Phase != "completed" || j.Output != reverseString("while frozen") {
		t.Fatalf("job through %s while the old leader is frozen: %+v %+v", follower.name, j, jr)
	}

	leader.signal(syscall.SIGCONT)
	c.waitViews("the thawed node alive again everywhere", 90*time.Second, c.members, func(views []view) error {
		if err := agree(3, 3)(views); err != nil {
			return err
		}
		if l := leaderOf(views); l == "" {
			return fmt.Errorf("no agreed leader")
		}
		return nil
	})
}
