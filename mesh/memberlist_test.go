package mesh_test

import (
	"crypto/rand"
	"io"
	"log"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/mesh/internal/meshtest"
)

// gossipEvents records departures and user messages. memberlist's
// NotifyLeave does not say dead from left (it sets the state on a shadowing
// field), but no node here calls Leave, so every departure is a death.
type gossipEvents struct {
	mu   sync.Mutex
	dead map[string]bool
	msgs [][]byte
}

func (e *gossipEvents) NotifyJoin(*memberlist.Node)   {}
func (e *gossipEvents) NotifyUpdate(*memberlist.Node) {}
func (e *gossipEvents) NotifyLeave(n *memberlist.Node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dead[n.Name] = true
}
func (e *gossipEvents) isDead(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dead[name]
}

func (e *gossipEvents) NodeMeta(int) []byte { return nil }
func (e *gossipEvents) NotifyMsg(b []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.msgs = append(e.msgs, append([]byte(nil), b...))
}
func (e *gossipEvents) GetBroadcasts(int, int) [][]byte { return nil }
func (e *gossipEvents) LocalState(bool) []byte          { return nil }
func (e *gossipEvents) MergeRemoteState([]byte, bool)   {}
func (e *gossipEvents) gotMsg(want []byte) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.msgs {
		if string(m) == string(want) {
			return true
		}
	}
	return false
}

type gossipNode struct {
	tr     *mesh.Transport
	ml     *memberlist.Memberlist
	events *gossipEvents
}

func startGossip(t *testing.T, ca *meshtest.CA, name string) *gossipNode {
	t.Helper()
	tr := newNode(t, ca, name)
	ev := &gossipEvents{dead: map[string]bool{}}
	cfg := memberlist.DefaultLocalConfig()
	cfg.Name = name
	cfg.Transport = tr.MemberlistTransport()
	cfg.UDPBufferSize = mesh.GossipPacketSize
	// Fast but not twitchy: the test machines are 2 shared cores under -race.
	cfg.ProbeInterval = 250 * time.Millisecond
	cfg.ProbeTimeout = 200 * time.Millisecond
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.PushPullInterval = time.Second
	cfg.SuspicionMult = 3
	cfg.TCPTimeout = time.Second
	cfg.Events = ev
	cfg.Delegate = ev
	cfg.Logger = log.New(io.Discard, "", 0)
	if os.Getenv("MESH_TEST_LOG") != "" {
		cfg.Logger = log.New(os.Stderr, name+" ", log.Lmicroseconds)
	}
	ml, err := memberlist.Create(cfg)
	if err != nil {
		t.Fatalf("memberlist.Create %s: %v", name, err)
	}
	t.Cleanup(func() { ml.Shutdown() })
	return &gossipNode{tr: tr, ml: ml, events: ev}
}

func TestMemberlistConvergesAndDetectsDeath(t *testing.T) {
	ca := meshtest.NewCA(t, "cluster")
	nodes := []*gossipNode{startGossip(t, ca, "g1"), startGossip(t, ca, "g2"), startGossip(t, ca, "g3")}
	if got := nodes[0].ml.LocalNode().Address(); got != nodes[0].tr.AdvertiseAddr() {
		t.Fatalf("memberlist advertises %s, want the transport's %s", got, nodes[0].tr.AdvertiseAddr())
	}
	for _, n := range nodes[1:] {
		if _, err := n.ml.Join([]string{nodes[0].tr.AdvertiseAddr()}); err != nil {
			t.Fatalf("join: %v", err)
		}
	}
	eventually(t, 10*time.Second, "all three see three alive members", func() bool {
		for _, n := range nodes {
			if n.ml.NumMembers() != 3 {
				return false
			}
		}
		return true
	})

	// A message larger than a datagram still arrives (over a stream).
	big := make([]byte, 4000)
	rand.Read(big) // incompressible
	var g2 *memberlist.Node
	for _, m := range nodes[0].ml.Members() {
		if m.Name == "g2" {
			g2 = m
		}
	}
	if err := nodes[0].ml.SendBestEffort(g2, big); err != nil {
		t.Fatalf("SendBestEffort: %v", err)
	}
	eventually(t, 5*time.Second, "g2 received the 4000-byte message", func() bool { return nodes[1].events.gotMsg(big) })

	// Kill g3's transport without leaving: the others must declare it dead.
	nodes[2].tr.Close()
	eventually(t, 20*time.Second, "g1 and g2 declare g3 dead", func() bool {
		return nodes[0].events.isDead("g3") && nodes[1].events.isDead("g3")
	})
	eventually(t, 10*time.Second, "g1 and g2 each see two alive members", func() bool {
		return nodes[0].ml.NumMembers() == 2 && nodes[1].ml.NumMembers() == 2
	})
}
