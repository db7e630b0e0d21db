package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// The audit journal on real processes: while jobs run and secrets change
// through every node, the leader is SIGKILLed; afterwards the survivors,
// and the killed node once restarted, verify the same chain with the same
// head, and the journal holds the changes made on both sides of the kill.
func TestAuditJournalSurvivesLeaderSIGKILL(t *testing.T) {
	t.Parallel()
	reverse := testwasm.Path(t, "reverse")
	c := newLoopbackCluster(t, 3)
	c.form()
	views := c.waitViews("3 alive voters and one leader", 90*time.Second, c.members, agree(3, 3))
	leader := c.byID(leaderOf(views))
	value := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(value, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Busy: every node takes jobs and secret changes.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var sets atomic.Int64
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				if !m.running() {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if r := m.cli("secret", "set", fmt.Sprintf("s-%d-%d", i, n), "--from-file", value); r.code == 0 {
					sets.Add(1)
				}
				m.cli("job", "submit", "--wasm", reverse, "--input", "x")
			}
		}()
	}
	time.Sleep(3 * time.Second)
	leader.kill()
	survivors := c.running()
	c.waitViews("a new leader", 60*time.Second, survivors, func(views []view) error {
		for _, v := range views {
			if _, _, l := v.summary(); l == "" || l == leader.id {
				return fmt.Errorf("%s reports leader %q", v.ServedBy, l)
			}
		}
		return nil
	})
	before := sets.Load()
	waitUntil(t, "secret changes after the kill", 60*time.Second, func() error {
		if sets.Load() < before+3 {
			return fmt.Errorf("%d sets since the kill", sets.Load()-before)
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()

	type verify struct {
		Ok         bool   `json:"ok"`
		Records    uint64 `json:"records"`
		HeadSeq    uint64 `json:"head_seq"`
		HeadSha256 string `json:"head_sha256"`
		Problem    string `json:"problem"`
	}
	check := func(members ...*member) verify {
		t.Helper()
		var first verify
		for i, m := range members {
			r := m.cli("audit", "verify", "--json")
			var v verify
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || !v.Ok {
				t.Fatalf("audit verify on %s: %d %q %q", m.name, r.code, r.stdout, r.stderr)
			}
			if i == 0 {
				first = v
			} else if v.HeadSeq != first.HeadSeq || v.HeadSha256 != first.HeadSha256 {
				t.Fatalf("%s's head is %d %s, %s's %d %s", m.name, v.HeadSeq, v.HeadSha256, members[0].name, first.HeadSeq, first.HeadSha256)
			}
		}
		return first
	}
	v := check(survivors...)
	if v.Records < uint64(sets.Load()) {
		t.Fatalf("the journal holds %d records, fewer than the %d secret changes", v.Records, sets.Load())
	}
	t.Logf("journal: %d records, head %d %s; %d secret sets", v.Records, v.HeadSeq, v.HeadSha256, sets.Load())

	leader.startNode()
	leader.waitUp(90 * time.Second)
	c.waitViews("the restarted node alive everywhere", 90*time.Second, c.members, agree(3, 3))
	if again := check(c.members...); again.HeadSha256 != v.HeadSha256 {
		t.Fatalf("the head moved from %s to %s with no change made", v.HeadSha256, again.HeadSha256)
	}
}
