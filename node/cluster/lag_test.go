package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/internal/testdisk"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A follower whose disk fills falls behind; the cluster says so (Progress:
// lagging, how far behind) while gossip still calls it alive, and once the
// operator frees the disk it catches up, by a snapshot install because the
// leader compacted its log meanwhile, and keeps no partial snapshot from
// the installs that failed for want of space.
func TestFollowerWithFullDiskLagsThenCatchesUp(t *testing.T) {
	tune := func(c *raft.Config) {
		fastRaft(c)
		c.TrailingLogs = 16
		c.SnapshotThreshold = 1 << 20 // only the snapshots this test asks for
	}
	nodes := make([]*tnode, 3)
	for i := range nodes {
		nodes[i] = newNode(t, 3)
		nodes[i].raft = tune
	}
	// The third node keeps its raft state on a 24 MiB disk.
	nodes[2].dir = testdisk.Small(t, 24<<20)
	for i, n := range nodes {
		n.start(i == 0)
		if i > 0 {
			n.join(nodes[0])
		}
	}
	eventually(t, 20*time.Second, "three voters", func() error { return converged(nodes, 3, 0) })
	leader := leaderOf(t, nodes)
	if leader == nodes[2] {
		if err := leader.store.Raft().LeadershipTransferToServer(raft.ServerID(nodes[0].id), raft.ServerAddress(nodes[0].addr)).Error(); err != nil {
			t.Fatalf("move leadership off the small disk: %v", err)
		}
		eventually(t, 10*time.Second, "a leader other than the small disk's", func() error {
			if l := leaderOf(t, nodes); l == nodes[2] {
				return fmt.Errorf("still %s", l.id)
			}
			return nil
		})
		leader = leaderOf(t, nodes)
	}
	slow := nodes[2]

	// Leave 256 KiB: a few appends go in, then nothing; a snapshot of the
	// state below (~2.4 MiB) never fits until the filler goes.
	filler := testdisk.Fill(t, slow.dir, 256<<10)
	input := bytes.Repeat([]byte("x"), 8<<10)
	for i := range 300 {
		cmd := &raftpb.Command{Cmd: &raftpb.Command_SubmitJob{SubmitJob: &raftpb.SubmitJob{
			Job: &raftpb.JobRecord{Id: fmt.Sprintf("lag-%03d", i), Kind: "wasm", ModuleSha256: "ab", Input: input}}}}
		// On a loaded machine the leader may change meanwhile (a fresh
		// clone's CI lost it at submit 7): send again through the leader
		// there is then; a job the first try committed is a conflict.
		for try := 0; ; try++ {
			_, err := leader.cl.Apply(ctxFor(t, 10*time.Second), cmd)
			if err == nil || (try > 0 && errors.Is(err, consensus.ErrConflict)) {
				break
			}
			if !consensus.WorthRetrying(err, true) || try == 20 {
				t.Fatalf("submit %d: %v", i, err)
			}
			time.Sleep(200 * time.Millisecond)
			eventually(t, 20*time.Second, "a leader", func() error {
				for _, n := range nodes {
					if n.store.Raft().State() == raft.Leader {
						return nil
					}
				}
				return errors.New("none yet")
			})
			leader = leaderOf(t, nodes)
		}
	}
	want := leader.store.State().AppliedIndex()
	eventually(t, 15*time.Second, "the full node reported lagging", func() error {
		p, ok := leader.cl.Progress(ctxFor(t, 2*time.Second))[slow.id]
		switch {
		case !ok:
			return fmt.Errorf("no progress from %s", slow.id)
		case !p.Lagging || p.Behind < 100:
			return fmt.Errorf("%s: %+v", slow.id, p)
		}
		return nil
	})
	for _, n := range []*tnode{leader, others(nodes, leader, slow)[0]} {
		if p := n.cl.Progress(ctxFor(t, 2*time.Second))[n.id]; p.Lagging {
			t.Fatalf("%s, whose disk is fine, is reported lagging: %+v", n.id, p)
		}
	}
	// Compact the leader's log: the slow node can now only catch up from a
	// snapshot. Give it 1 MiB: each install writes what fits of the 2.4
	// MiB and fails (raft's own snapshot store kept each partial one, and
	// its open file, so the disk stayed full).
	if err := leader.store.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot the leader: %v", err)
	}
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-1<<20); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // installs are attempted and fail
	if got := slow.store.State().AppliedIndex(); got >= want {
		t.Fatalf("the slow node caught up (applied %d of %d) with 1 MiB free: the snapshot was to be larger", got, want)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the slow node caught up", func() error {
		if got := slow.store.State().AppliedIndex(); got < want {
			return fmt.Errorf("%s applied %d of %d", slow.id, got, want)
		}
		return nil
	})
	if _, ok := slow.store.State().Job("lag-299"); !ok {
		t.Fatal("the caught-up node does not hold the last job")
	}
	eventually(t, 15*time.Second, "the slow node no longer lagging", func() error {
		if p := leader.cl.Progress(ctxFor(t, 2*time.Second))[slow.id]; p.Lagging {
			return fmt.Errorf("%+v", p)
		}
		return nil
	})
	// The entries the installed snapshot replaced are gone from its log.
	if first, _, err := slow.store.LogRange(); err != nil || first != 0 && first <= 20 {
		t.Errorf("after the install the slow node's log starts at %d (%v); the entries before the snapshot should be gone", first, err)
	}
	ents, err := os.ReadDir(filepath.Join(slow.dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("a partial snapshot was left: %s", e.Name())
		}
	}
}

// A snapshot (what 'palyra snapshot save' takes) right after a membership
// change on an idle cluster: raft refused it ("wait until the
// configuration entry at N has been applied") until the next command,
// because configuration entries did not count as applied.
func TestSnapshotRightAfterAMembershipChange(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "three voters", func() error { return converged(nodes, 3, 0) })
	leader := leaderOf(t, nodes)
	last := leader.store.Raft().AppliedIndex()
	_, rc, err := leader.store.TakeSnapshot()
	if err != nil {
		t.Fatalf("snapshot after the last membership change (raft applied %d, state applied %d): %v",
			last, leader.store.State().AppliedIndex(), err)
	}
	rc.Close()

	// Idle and healthy: no follower is behind (the progress once compared
	// the leader's last index with the state's last command, so the
	// configuration and no-op entries showed as a lag for ever).
	eventually(t, 5*time.Second, "followers 0 behind", func() error {
		for id, p := range leader.cl.Progress(ctxFor(t, 2*time.Second)) {
			if p.Behind != 0 || p.Lagging {
				return fmt.Errorf("%s: %+v", id, p)
			}
		}
		return nil
	})
}
