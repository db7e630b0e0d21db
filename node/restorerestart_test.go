package node_test

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/node"
)

// A cluster restored from a snapshot survives restarts of its nodes. Every
// node held only the restore's raft snapshot, and a restarted node applies
// nothing past its snapshot until a leader speaks, so its certificate
// ledger lacked the nodes that joined after the restore; knowing no leader,
// it refused them, and after two restarts the cluster had no quorum for
// good (a user trial). A node now finds such leaves recorded in its own
// log (Store.TailHasCert).
func TestRestoredClusterSurvivesRestarts(t *testing.T) {
	first := start(t, node.Config{})
	op := operator(t, first, first.Addr())
	file, _, _ := saveSnapshot(t, op)
	first.Close()

	addr := freeUDP(t)
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := node.Restore(callCtx(t), bytes.NewReader(file), node.RestoreConfig{DataDir: dir, Listen: addr}); err != nil {
		t.Fatal(err)
	}
	r := start(t, node.Config{DataDir: dir, Listen: addr})
	opR := operator(t, r, r.Addr())
	dir2, dir3 := t.TempDir(), t.TempDir()
	n2 := join(t, opR, r.Addr(), dir2)
	n3 := join(t, opR, r.Addr(), dir3)
	waitFor(t, "3 alive voters and a leader after the joins", time.Minute, func() bool { ok, _ := healthy(r, 3, 3); return ok })

	// The restored node restarts: it must take its peers back.
	r.Close()
	r = start(t, node.Config{DataDir: dir, Listen: addr})
	waitFor(t, "the restarted restored node to see 3 alive voters and a leader", time.Minute, func() bool { ok, _ := healthy(r, 3, 3); return ok })
	// Then a node that joined after the restore restarts too.
	addr3 := n3.Addr()
	n3.Close()
	n3 = start(t, node.Config{DataDir: dir3, Listen: addr3})
	waitFor(t, "the restarted joiner to see 3 alive voters and a leader", time.Minute, func() bool { ok, _ := healthy(n3, 3, 3); return ok })
	waitCompleted(t, operator(t, r, n2.Addr()), submit(t, operator(t, r, n2.Addr()), "after the restarts"))
}
