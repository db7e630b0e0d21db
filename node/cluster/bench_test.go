package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkLeaderKill measures, per killed leader of a 3-node cluster, how
// long until both survivors know a new leader (failover) and until gossip
// marks the dead node dead on both (detection). "lan" uses LANTuning and
// raft's default timers (production); "fast" the test timers.
//
//	go test -run '^$' -bench LeaderKill -benchtime 3x ./node/cluster
func BenchmarkLeaderKill(b *testing.B) {
	for _, mode := range []struct {
		name   string
		tuning Tuning
		raft   func(*raft.Config)
	}{
		{"lan", LANTuning(), func(*raft.Config) {}},
		{"fast", FastTuning(), fastRaft},
	} {
		b.Run(mode.name, func(b *testing.B) {
			var failover, detect time.Duration
			for i := 0; i < b.N; i++ {
				f, d := leaderKill(b, mode.tuning, mode.raft)
				failover += f
				detect += d
			}
			b.ReportMetric(float64(failover.Milliseconds())/float64(b.N), "failover-ms")
			b.ReportMetric(float64(detect.Milliseconds())/float64(b.N), "detect-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func leaderKill(b *testing.B, tuning Tuning, tune func(*raft.Config)) (failover, detect time.Duration) {
	b.StopTimer()
	nodes := make([]*tnode, 3)
	for i := range nodes {
		nodes[i] = newNode(b, 3)
		nodes[i].tuning, nodes[i].raft = &tuning, tune
		nodes[i].start(i == 0)
		if i > 0 {
			nodes[i].join(nodes[0])
		}
	}
	eventually(b, 60*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	old := leaderOf(b, nodes)
	survivors := others(nodes, old)
	killed := time.Now()
	old.stop()
	eventually(b, 60*time.Second, "new leader and detection", func() error {
		if failover == 0 && allSee(survivors, func(n *tnode) bool { _, id := n.cl.Leader(); return id != "" && id != old.id }) {
			failover = time.Since(killed)
		}
		if detect == 0 && allSee(survivors, func(n *tnode) bool { return viewOf(n).byID[old.id].State == StateDead }) {
			detect = time.Since(killed)
		}
		if failover == 0 || detect == 0 {
			return fmt.Errorf("failover %v detect %v", failover, detect)
		}
		return nil
	})
	for _, n := range nodes {
		n.stop()
	}
	return failover, detect
}
