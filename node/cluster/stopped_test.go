package cluster

import (
	"fmt"
	"testing"
	"time"
)

// A voter that announces a clean stop (Stopping, as the node's Close does)
// is listed as stopped by the survivors, and otherwise handled exactly as
// a dead one: the spare is promoted and it is removed from raft. A voter
// that just vanishes is listed as dead. A stopped node that starts again
// is alive.
func TestCleanStopIsListedStoppedACrashDead(t *testing.T) {
	nodes := formCluster(t, 4, 3)
	eventually(t, 20*time.Second, "3 voters and 1 non-voter", func() error { return converged(nodes, 3, 1) })
	leader := leaderOf(t, nodes)
	var stopped *tnode
	v := viewOf(leader)
	for _, n := range others(nodes, leader) {
		if v.byID[n.id].Voter {
			stopped = n
			break
		}
	}
	if stopped == nil {
		t.Fatalf("want a follower voter, got view %+v", v.byID)
	}

	if err := stopped.cl.Stopping(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatalf("Stopping: %v", err)
	}
	stopped.stop()
	rest := others(nodes, stopped)
	eventually(t, 30*time.Second, "the stopped voter listed stopped, replaced by the spare and out of raft", func() error {
		if err := converged(rest, 3, 0); err != nil {
			return err
		}
		for _, n := range rest {
			if m := viewOf(n).byID[stopped.id]; m.InRaft || m.State != StateStopped {
				return fmt.Errorf("%s sees the stopped voter as %+v, want stopped and out of raft", n.id, m)
			}
		}
		return nil
	})

	crashed := others(rest, leaderOf(t, rest))[0]
	crashed.stop()
	survivors := others(rest, crashed)
	// The stopped node, out of raft, is forgotten 10 grace periods after
	// it stopped; until then it stays stopped.
	eventually(t, 30*time.Second, "the crashed node listed dead, the stopped one not", func() error {
		for _, n := range survivors {
			view := viewOf(n)
			if m := view.byID[crashed.id]; m.State != StateDead {
				return fmt.Errorf("%s sees the crashed node as %+v, want dead", n.id, m)
			}
			if m, ok := view.byID[stopped.id]; ok && m.State != StateStopped {
				return fmt.Errorf("%s sees the stopped node as %+v, want stopped", n.id, m)
			}
		}
		return nil
	})

	stopped.start(false)
	eventually(t, 30*time.Second, "the stopped node alive again", func() error {
		for _, n := range survivors {
			if m := viewOf(n).byID[stopped.id]; m.State != StateAlive {
				return fmt.Errorf("%s sees the restarted node as %+v, want alive", n.id, m)
			}
		}
		return nil
	})
}
