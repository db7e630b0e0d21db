package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// testCluster is a set of palyra node processes forming one cluster,
// driven only through the CLI. The first member creates the cluster and
// holds the operator credential every CLI call uses.
type testCluster struct {
	t       *testing.T
	members []*member
	extra   []string // flags every member's node start/join gets
}

// newCluster prepares (does not start) one member per address; netns, if
// not nil, names each member's network namespace. Every process is killed
// when the test ends, and on failure each member's log tail is printed.
func newCluster(t *testing.T, addrs, netns []string) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	for i, a := range addrs {
		m := &member{t: t, name: fmt.Sprintf("n%d", i+1), dataDir: t.TempDir(), addr: a}
		if netns != nil {
			m.netns = netns[i]
		}
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.opDir = c.members[0].dataDir
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.kill()
		}
		if t.Failed() {
			for _, m := range c.members {
				t.Logf("---- %s (%s, %s) log tail:\n%s", m.name, m.id, m.addr, m.tail(40))
			}
		}
	})
	return c
}

// newLoopbackCluster prepares n members on distinct 127.0.0.1 ports.
func newLoopbackCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = freeUDPAddr(t)
	}
	return newCluster(t, addrs, nil)
}

// form starts the first member, which creates the cluster, then pairs and
// joins every other member through it, one at a time.
func (c *testCluster) form() {
	c.t.Helper()
	first := c.members[0]
	first.startNode(c.extra...)
	first.waitUp(60 * time.Second)
	for _, m := range c.members[1:] {
		m.joinNode(c.pairCode(first), first.addr, c.extra...)
		m.waitUp(90 * time.Second)
	}
}

// pairCode makes a one-time node code through via.
func (c *testCluster) pairCode(via *member) string {
	c.t.Helper()
	r := via.cli("pair", "create", "--kind", "node", "--json")
	var out struct {
		Code string `json:"code"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Code == "" {
		c.t.Fatalf("pair create --kind node via %s: %+v", via.name, r)
	}
	return out.Code
}

// running returns the members whose process runs.
func (c *testCluster) running() []*member {
	var out []*member
	for _, m := range c.members {
		if m.running() {
			out = append(out, m)
		}
	}
	return out
}

// byID returns the member with node id id.
func (c *testCluster) byID(id string) *member {
	c.t.Helper()
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}
	c.t.Fatalf("no member has node id %q", id)
	return nil
}

// follower returns the first member that is not leader.
func (c *testCluster) follower(leader *member) *member {
	c.t.Helper()
	for _, m := range c.members {
		if m != leader {
			return m
		}
	}
	c.t.Fatal("the cluster has no member but the leader")
	return nil
}

// waitViews polls the views of members until check accepts them all, or
// fails the test after d with the last views and check's last complaint.
func (c *testCluster) waitViews(what string, d time.Duration, members []*member, check func(views []view) error) []view {
	c.t.Helper()
	deadline := time.Now().Add(d)
	var last error
	var views []view
	for {
		views = views[:0]
		last = nil
		for _, m := range members {
			if gone, err := m.exited(); gone && m.running() {
				c.t.Fatalf("waiting for %s: %s exited (%v); log:\n%s", what, m.name, err, m.tail(60))
			}
			v, ok := m.nodes()
			if !ok {
				last = fmt.Errorf("%s did not answer 'nodes'", m.name)
				break
			}
			views = append(views, v)
		}
		if last == nil {
			if last = check(views); last == nil {
				return views
			}
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for i, v := range views {
				fmt.Fprintf(&b, "\n  %s sees: %s", members[i].name, v)
			}
			c.t.Fatalf("timed out after %s waiting for %s: %v%s", d, what, last, b.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// agree accepts views in which every member sees exactly alive alive
// nodes, voters voters, and one leader, the same one everywhere.
func agree(alive, voters int) func([]view) error {
	return func(views []view) error {
		leader := ""
		for i, v := range views {
			a, vo, l := v.summary()
			if a != alive || vo != voters || l == "" {
				return fmt.Errorf("view %d (served by %s): %d alive, %d voters, leader %q; want %d alive, %d voters, one leader", i, v.ServedBy, a, vo, l, alive, voters)
			}
			if leader != "" && l != leader {
				return fmt.Errorf("views disagree on the leader: %s and %s", leader, l)
			}
			leader = l
		}
		return nil
	}
}

// leaderOf returns the leader the (agreeing) views name.
func leaderOf(views []view) string {
	_, _, l := views[0].summary()
	return l
}
