package e2e

import (
	"fmt"
	"testing"
	"time"
)

// The node that created the cluster (and led it) is SIGKILLed, then
// restarted as the README says: `palyra node start --data-dir D`, no
// --listen. It comes back on the address it had (not the default
// 127.0.0.1:7444), and the others take it back as a voter.
func TestRestartWithoutListenKeepsTheAddress(t *testing.T) {
	t.Parallel()
	c := newLoopbackCluster(t, 3)
	c.form()
	c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))
	first := c.members[0]
	first.kill()
	c.waitViews("a leader among the survivors", 60*time.Second, c.running(), func(views []view) error {
		for _, v := range views {
			if _, _, l := v.summary(); l == "" || l == first.id {
				return fmt.Errorf("%s reports leader %q", v.ServedBy, l)
			}
		}
		return nil
	})

	first.restartNode()
	first.waitUp(90 * time.Second) // it answers on first.addr, its recorded address
	if s, ok := first.status(); !ok || s.Address != first.addr {
		t.Fatalf("restarted without --listen: status %+v, want address %s", s, first.addr)
	}
	c.waitViews("the restarted first node an alive voter at its address everywhere", 90*time.Second, c.members, func(views []view) error {
		if err := agree(3, 3)(views); err != nil {
			return err
		}
		for _, v := range views {
			if n, _ := v.node(first.id); n.Address != first.addr {
				return fmt.Errorf("%s lists %s at %q, want %s", v.ServedBy, first.id, n.Address, first.addr)
			}
		}
		return nil
	})
}
