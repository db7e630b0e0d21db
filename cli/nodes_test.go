package cli

import (
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A node that is not alive gets no new work, whatever the operator's
// setting says; the SCHEDULING cell says both.
func TestSchedulingText(t *testing.T) {
	for _, c := range []struct {
		n    *palyrav1.NodeInfo
		want string
	}{
		{&palyrav1.NodeInfo{State: "alive", Eligible: true}, "eligible"},
		{&palyrav1.NodeInfo{State: "alive", Eligible: false}, "ineligible"},
		{&palyrav1.NodeInfo{State: "alive", Eligible: false, Draining: true}, "draining"},
		{&palyrav1.NodeInfo{State: "dead", Eligible: true}, "eligible (not alive: gets none)"},
		{&palyrav1.NodeInfo{State: "left", Eligible: false}, "ineligible (not alive: gets none)"},
	} {
		if got := schedulingText(c.n); got != c.want {
			t.Errorf("%v: %q, want %q", c.n, got, c.want)
		}
	}
}

// lag marks n as lagging: behind entries, last contact ms ago (-1 never).
func lag(n *palyrav1.NodeInfo, behind uint64, contactMS int64) *palyrav1.NodeInfo {
	n.InRaft, n.RaftKnown, n.RaftLagging, n.RaftBehind, n.RaftLastContactMs = true, true, true, behind, contactMS
	return n
}

// The RAFT cell of 'palyra nodes'.
func TestRaftText(t *testing.T) {
	for _, c := range []struct {
		n    *palyrav1.NodeInfo
		want string
	}{
		{&palyrav1.NodeInfo{State: "alive"}, "-"},
		{&palyrav1.NodeInfo{State: "alive", InRaft: true}, "no answer"},
		{&palyrav1.NodeInfo{State: "dead", InRaft: true}, "-"},
		{&palyrav1.NodeInfo{State: "alive", InRaft: true, RaftKnown: true, Leader: true}, "leader"},
		{&palyrav1.NodeInfo{State: "alive", InRaft: true, RaftKnown: true}, "ok"},
		{&palyrav1.NodeInfo{State: "alive", InRaft: true, RaftKnown: true, RaftBehind: 12}, "ok (12 behind)"},
		{lag(&palyrav1.NodeInfo{State: "alive"}, 4000, 20), "LAGGING: 4000 entries behind"},
		{lag(&palyrav1.NodeInfo{State: "alive"}, 0, 12000), "LAGGING: leader last heard 12s ago"},
		{lag(&palyrav1.NodeInfo{State: "alive"}, 0, -1), "LAGGING: never heard from a leader"},
	} {
		if got := raftText(c.n); got != c.want {
			t.Errorf("raftText(%v) = %q, want %q", c.n, got, c.want)
		}
	}
}

// status's voters line: alive voters against the quorum, and who is down.
func TestVotersHealth(t *testing.T) {
	n := func(id, state string, voter bool) *palyrav1.NodeInfo {
		return &palyrav1.NodeInfo{Id: id, State: state, Voter: voter}
	}
	for _, c := range []struct {
		nodes []*palyrav1.NodeInfo
		want  string
		tol   int
	}{
		{[]*palyrav1.NodeInfo{n("a", "alive", true), n("b", "alive", true), n("c", "alive", true), n("w", "dead", false)}, "3 of 3 alive: can lose 1 more", 1},
		{[]*palyrav1.NodeInfo{n("a", "alive", true), n("b", "dead", true), n("c", "alive", true)}, "2 of 3 alive: can lose no voter without losing the quorum (not alive: b dead)", 0},
		{[]*palyrav1.NodeInfo{n("a", "alive", true), n("b", "dead", true), n("c", "left", true)}, "1 of 3 alive: NO QUORUM (writes and linearizable reads fail until a majority is back) (not alive: b dead, c left)", -1},
		{[]*palyrav1.NodeInfo{n("a", "alive", true)}, "1 of 1 alive: can lose no voter without losing the quorum", 0},
		{[]*palyrav1.NodeInfo{n("a", "alive", true), n("b", "alive", true), n("c", "alive", true), n("d", "alive", true), n("e", "alive", true)}, "5 of 5 alive: can lose 2 more", 2},
		// A voter that is alive but far behind the leader's log acknowledges
		// nothing: it does not count towards the failure tolerance.
		{[]*palyrav1.NodeInfo{n("a", "alive", true), lag(n("b", "alive", true), 52000, 300), n("c", "alive", true)},
			"3 of 3 alive, 1 lagging: can lose no voter without losing the quorum (lagging, not counted in the failure tolerance: b 52000 entries behind; see 'palyra nodes')", 0},
		{[]*palyrav1.NodeInfo{n("a", "alive", true), lag(n("b", "alive", true), 0, -1), n("c", "dead", true)},
			"2 of 3 alive, 1 lagging: NO QUORUM (writes and linearizable reads fail until a majority is back) (not alive: c dead) (lagging, not counted in the failure tolerance: b never heard from a leader; see 'palyra nodes')", -1},
	} {
		h := votersHealth(c.nodes)
		if h.String() != c.want || h.tolerance() != c.tol {
			t.Errorf("%q (tolerance %d), want %q (%d)", h.String(), h.tolerance(), c.want, c.tol)
		}
	}
}

// doctor's raft check: ok while every live raft server keeps up; a
// lagging or silent one is a warning naming it.
func TestRaftCheckFrom(t *testing.T) {
	ok := &palyrav1.NodeInfo{Id: "a", State: "alive", InRaft: true, RaftKnown: true}
	dead := &palyrav1.NodeInfo{Id: "d", State: "dead", InRaft: true}
	if c := raftCheckFrom([]*palyrav1.NodeInfo{ok, dead}); c.Status != "ok" {
		t.Fatalf("healthy: %+v", c)
	}
	slow := lag(&palyrav1.NodeInfo{Id: "b", State: "alive"}, 9000, 40)
	silent := &palyrav1.NodeInfo{Id: "c", State: "alive", InRaft: true}
	c := raftCheckFrom([]*palyrav1.NodeInfo{ok, slow, silent})
	if c.Status != "warn" || !strings.Contains(c.Detail, "b: 9000 entries behind") || !strings.Contains(c.Detail, "c: no answer") || c.Fix == "" {
		t.Fatalf("lagging: %+v", c)
	}
}

// doctor's failure tolerance: a cluster that can lose no more voters is a
// warning (doctor said OK while status said "can lose no voter"), one
// without a quorum a failure; a single voter by design is fine.
func TestQuorumCheckFrom(t *testing.T) {
	v := func(id, state string) *palyrav1.NodeInfo {
		return &palyrav1.NodeInfo{Id: id, State: state, Voter: true}
	}
	for _, c := range []struct {
		nodes []*palyrav1.NodeInfo
		want  string
	}{
		{[]*palyrav1.NodeInfo{v("a", "alive"), v("b", "alive"), v("c", "alive")}, "ok"},
		{[]*palyrav1.NodeInfo{v("a", "alive"), v("b", "alive"), v("c", "dead")}, "warn"},
		{[]*palyrav1.NodeInfo{v("a", "alive"), v("b", "dead"), v("c", "dead")}, "fail"},
		{[]*palyrav1.NodeInfo{v("a", "alive")}, "ok"},
	} {
		if got := quorumCheckFrom(c.nodes); got.Status != c.want || (c.want != "ok" && !strings.Contains(got.Fix, "palyra node remove")) {
			t.Errorf("%d voters: %+v, want %s", len(c.nodes), got, c.want)
		}
	}
}

// The nodes table shows the labels an operator set, not those a node sets
// for itself (CA keys, certificate root and expiry: ca status shows them).
func TestUserLabels(t *testing.T) {
	got := userLabels(map[string]string{"zone": "a", "palyra.ca": "ab12", "palyra.cert": "cd34", "palyra.certexp": "1,2"})
	if len(got) != 1 || got["zone"] != "a" {
		t.Fatalf("userLabels: %v", got)
	}
}

// A rolling upgrade under way shows: the live nodes' versions differ, and
// the note names which node runs which; dead nodes and agreeing ones say
// nothing.
func TestMixedVersions(t *testing.T) {
	same := []*palyrav1.NodeInfo{{Id: "n1", State: "alive", Version: "0.1.0+aaa"}, {Id: "n2", State: "alive", Version: "0.1.0+aaa"}, {Id: "n3", State: "dead", Version: "0.1.0+old"}}
	if got := mixedVersions(same); got != "" {
		t.Fatalf("agreeing nodes: %q", got)
	}
	mixed := append(same, &palyrav1.NodeInfo{Id: "n4", State: "alive", Version: "0.1.0+bbb"})
	if got := mixedVersions(mixed); !strings.Contains(got, "0.1.0+aaa on n1, n2; 0.1.0+bbb on n4") {
		t.Fatalf("mixed: %q", got)
	}
}
