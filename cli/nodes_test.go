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
		{&palyrav1.NodeInfo{State: "alive", Eligible: false, Draining: true, Running: 2}, "draining"},
		{&palyrav1.NodeInfo{State: "alive", Eligible: false, Draining: true}, "drained (draining, nothing placed)"},
		{&palyrav1.NodeInfo{State: "dead", Eligible: true}, "eligible (not alive: gets none)"},
		{&palyrav1.NodeInfo{State: "left", Eligible: true}, "- (left: gets none)"},
		{&palyrav1.NodeInfo{State: "removed", Eligible: false}, "- (removed: gets none)"},
	} {
		if got := schedulingText(c.n); got != c.want {
			t.Errorf("%v: %q, want %q", c.n, got, c.want)
		}
	}
}

// lag marks n as lagging: behind entries, last contact ms ago (-1 never).
// leader marks n as the raft leader, answering its progress.
func leader(n *palyrav1.NodeInfo) *palyrav1.NodeInfo {
	n.InRaft, n.RaftKnown, n.Leader = true, true, true
	return n
}

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

// With no leader listed, a live server is not called LAGGING (a trial took
// the lone survivor's LAGGING for its own fault), and a stopped node's
// empty capacity says why.
func TestNodesCellsWithoutALeader(t *testing.T) {
	n := lag(&palyrav1.NodeInfo{State: "alive"}, 0, 3400)
	if got := leaderlessRaftText(n, raftText(n)); got != "no leader (last heard 3.4s ago)" {
		t.Errorf("leaderless, heard 3.4s ago: %q", got)
	}
	n = lag(&palyrav1.NodeInfo{State: "alive"}, 0, -1)
	if got := leaderlessRaftText(n, raftText(n)); got != "no leader (never heard from one)" {
		t.Errorf("leaderless, never heard: %q", got)
	}
	ok := &palyrav1.NodeInfo{State: "alive", InRaft: true, RaftKnown: true}
	if got := leaderlessRaftText(ok, raftText(ok)); got != "ok" {
		t.Errorf("leaderless, not lagging: %q", got)
	}
	if got := capacityText(&palyrav1.NodeInfo{State: "stopped"}); got != "- (not alive)" {
		t.Errorf("stopped node's capacity: %q", got)
	}
	if got := capacityText(&palyrav1.NodeInfo{State: "alive", Capacity: map[string]int64{"wasm": 4, "browser": 2}}); got != "browser=2,wasm=4" {
		t.Errorf("capacity: %q", got)
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
		{[]*palyrav1.NodeInfo{n("a", "alive", true), n("b", "dead", true), n("c", "left", true)}, "1 of 3 alive: NO QUORUM (writes and linearizable reads fail until a majority is back; if it is lost for good: 'palyra node recover --dry-run' on a stopped survivor) (not alive: b dead, c left)", -1},
		{[]*palyrav1.NodeInfo{n("a", "alive", true)}, "1 of 1 alive: can lose no voter without losing the quorum", 0},
		{[]*palyrav1.NodeInfo{n("a", "alive", true), n("b", "alive", true), n("c", "alive", true), n("d", "alive", true), n("e", "alive", true)}, "5 of 5 alive: can lose 2 more", 2},
		// A voter that is alive but far behind the leader's log acknowledges
		// nothing: it does not count towards the failure tolerance.
		{[]*palyrav1.NodeInfo{leader(n("a", "alive", true)), lag(n("b", "alive", true), 52000, 300), n("c", "alive", true)},
			"3 of 3 alive, 1 lagging: can lose no voter without losing the quorum (lagging, not counted in the failure tolerance: b 52000 entries behind; see 'palyra nodes')", 0},
		{[]*palyrav1.NodeInfo{leader(n("a", "alive", true)), lag(n("b", "alive", true), 0, -1), n("c", "dead", true)},
			"2 of 3 alive, 1 lagging: NO QUORUM (writes and linearizable reads fail until a majority is back; if it is lost for good: 'palyra node recover --dry-run' on a stopped survivor) (not alive: c dead) (lagging, not counted in the failure tolerance: b never heard from a leader; see 'palyra nodes')", -1},
		// With no leader, none lags behind one: the voter answering listed
		// itself as lagging while the quorum was gone.
		{[]*palyrav1.NodeInfo{lag(n("a", "alive", true), 0, 18800), n("b", "dead", true), n("c", "dead", true)},
			"1 of 3 alive: NO QUORUM (writes and linearizable reads fail until a majority is back; if it is lost for good: 'palyra node recover --dry-run' on a stopped survivor) (not alive: b dead, c dead)", -1},
		// Every voter alive by gossip but no leader (a stuck election):
		// nothing commits, so the tolerance is none, said as such.
		{[]*palyrav1.NodeInfo{lag(n("a", "alive", true), 0, 9000), lag(n("b", "alive", true), 0, 9000), lag(n("c", "alive", true), 0, 9000)},
			"3 of 3 alive: NO LEADER (an election is under way, or the voters cannot elect one: writes and linearizable reads fail until one is elected; see each voter's log)", -1},
	} {
		h := votersHealth(c.nodes, 0)
		if h.String() != c.want || h.tolerance() != c.tol {
			t.Errorf("%q (tolerance %d), want %q (%d)", h.String(), h.tolerance(), c.want, c.tol)
		}
	}
}

// Below the number of voters the cluster keeps, the voters' health names
// the target and what restores it: after a 'node leave' the two voters
// left were "2 of 2 alive", with no sign that the cluster wants three and
// has no spare. At the target, or with it unknown (an older node), it
// says nothing more.
func TestVotersHealthNamesTheTargetBelowIt(t *testing.T) {
	voter := func(id string) *palyrav1.NodeInfo {
		return &palyrav1.NodeInfo{Id: id, State: "alive", Voter: true, InRaft: true}
	}
	spare := &palyrav1.NodeInfo{Id: "s", State: "alive", InRaft: true}
	gone := &palyrav1.NodeInfo{Id: "g", State: "dead"} // not in raft: no spare
	for _, c := range []struct {
		nodes  []*palyrav1.NodeInfo
		target int
		want   string
	}{
		{[]*palyrav1.NodeInfo{voter("a"), voter("b")}, 3, "2 of 2 alive (target 3: add a node to reach it): can lose no voter without losing the quorum"},
		{[]*palyrav1.NodeInfo{voter("a"), voter("b"), gone}, 3, "2 of 2 alive (target 3: add a node to reach it): can lose no voter without losing the quorum"},
		{[]*palyrav1.NodeInfo{voter("a"), voter("b"), spare}, 3, "2 of 2 alive (target 3: a spare is promoted once it is stable): can lose no voter without losing the quorum"},
		// One voter and one spare stay so (an even number of voters adds
		// nothing): a node is still missing.
		{[]*palyrav1.NodeInfo{voter("a"), spare}, 3, "1 of 1 alive (target 3: add a node to reach it): can lose no voter without losing the quorum"},
		{[]*palyrav1.NodeInfo{voter("a")}, 3, "1 of 1 alive (target 3: add 2 nodes to reach it): can lose no voter without losing the quorum"},
		{[]*palyrav1.NodeInfo{voter("a"), voter("b"), voter("c")}, 3, "3 of 3 alive: can lose 1 more"},
		{[]*palyrav1.NodeInfo{voter("a")}, 1, "1 of 1 alive: can lose no voter without losing the quorum"},
		{[]*palyrav1.NodeInfo{voter("a"), voter("b")}, 0, "2 of 2 alive: can lose no voter without losing the quorum"},
	} {
		if got := votersHealth(c.nodes, c.target).String(); got != c.want {
			t.Errorf("%d nodes, target %d: %q, want %q", len(c.nodes), c.target, got, c.want)
		}
	}
	// doctor warns, names the target, and says to add a node (not to
	// bring back voters that are down: none is).
	ch := quorumCheckFrom(&palyrav1.ListNodesResponse{Nodes: []*palyrav1.NodeInfo{voter("a"), voter("b")}, TargetVoters: 3})
	if ch.Status != "warn" || !strings.Contains(ch.Detail, "target 3") || !strings.Contains(ch.Fix, "palyra node join") || strings.Contains(ch.Fix, "down back") {
		t.Errorf("doctor below the target: %+v", ch)
	}
}

// doctor fails when this machine's node runs but is not a raft member
// (it left, was started again and did not rejoin: in_raft false), which
// every other check let pass; a voter or a spare is fine, and a node the
// list does not name, or names removed, is left to the other checks.
func TestMembershipCheckFrom(t *testing.T) {
	nodes := []*palyrav1.NodeInfo{
		{Id: "v", State: "alive", Voter: true, InRaft: true},
		{Id: "s", State: "alive", InRaft: true},
		{Id: "out", State: "alive"},
		{Id: "gone", State: "removed"},
	}
	for self, want := range map[string]string{"v": "ok", "s": "ok", "out": "fail", "gone": "", "other": "", "": ""} {
		ch, ok := membershipCheckFrom(self, "/var/lib/palyra", nodes)
		if ok != (want != "") || ch.Status != want {
			t.Errorf("self %q: %+v (%v), want %q", self, ch, ok, want)
		}
		if want == "fail" && (!strings.Contains(ch.Detail, "not a raft member") ||
			!strings.Contains(ch.Fix, "palyra node start --data-dir /var/lib/palyra") || !strings.Contains(ch.Fix, "palyra node join")) {
			t.Errorf("self %q: the failure does not say what is wrong and what to do: %+v", self, ch)
		}
	}
}

// doctor's raft check: ok while every live raft server keeps up; a
// lagging or silent one is a warning naming it.
func TestRaftCheckFrom(t *testing.T) {
	ok := &palyrav1.NodeInfo{Id: "a", State: "alive", InRaft: true, RaftKnown: true, Leader: true}
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
	// No leader: nothing lags behind one; the check says so instead of
	// naming every server as lagging.
	alone := lag(&palyrav1.NodeInfo{Id: "x", State: "alive"}, 0, 18800)
	if c := raftCheckFrom([]*palyrav1.NodeInfo{alone, dead}); c.Status != "warn" || !strings.Contains(c.Detail, "no leader") || strings.Contains(c.Detail, "x:") {
		t.Fatalf("no leader: %+v", c)
	}
}

// doctor's failure tolerance: a cluster that can lose no more voters is a
// warning (doctor said OK while status said "can lose no voter"), one
// without a quorum a failure; a single voter is fine at a target of one.
func TestQuorumCheckFrom(t *testing.T) {
	v := func(id, state string) *palyrav1.NodeInfo {
		return &palyrav1.NodeInfo{Id: id, State: state, Voter: true}
	}
	// With a quorum, a voter down is replaced by removing it; without
	// one nothing can be removed, so the fix is to bring voters back or,
	// lost for good, to recover a survivor (doctor named 'node remove',
	// which fails without a quorum).
	for _, c := range []struct {
		nodes     []*palyrav1.NodeInfo
		want, fix string
	}{
		{[]*palyrav1.NodeInfo{v("a", "alive"), v("b", "alive"), v("c", "alive")}, "ok", ""},
		{[]*palyrav1.NodeInfo{v("a", "alive"), v("b", "alive"), v("c", "dead")}, "warn", "palyra node remove"},
		{[]*palyrav1.NodeInfo{v("a", "alive"), v("b", "dead"), v("c", "dead")}, "fail", "palyra node recover"},
		{[]*palyrav1.NodeInfo{v("a", "alive")}, "ok", ""},
	} {
		if got := quorumCheckFrom(&palyrav1.ListNodesResponse{Nodes: c.nodes}); got.Status != c.want || !strings.Contains(got.Fix, c.fix) {
			t.Errorf("%d voters: %+v, want %s with a fix naming %q", len(c.nodes), got, c.want, c.fix)
		}
	}
	// Three voters alive by gossip and no leader: a failure (doctor
	// passed it once the serving node no longer called itself lagging).
	stuck := []*palyrav1.NodeInfo{lag(v("a", "alive"), 0, 9000), lag(v("b", "alive"), 0, 9000), lag(v("c", "alive"), 0, 9000)}
	if got := quorumCheckFrom(&palyrav1.ListNodesResponse{Nodes: stuck}); got.Status != "fail" || !strings.Contains(got.Detail, "NO LEADER") ||
		strings.Contains(got.Fix, "down back") || !strings.Contains(got.Fix, "no election ends") {
		t.Errorf("no leader: %+v, want a failure saying so, with a fix about the election (no voter is down)", got)
	}
	// A leader gossip briefly suspects still leads.
	suspect := leader(v("a", "suspect"))
	if !hasLeader([]*palyrav1.NodeInfo{suspect, v("b", "alive")}) || hasLeader([]*palyrav1.NodeInfo{leader(v("a", "dead"))}) ||
		hasLeader([]*palyrav1.NodeInfo{leader(v("a", "stopped"))}) {
		t.Error("hasLeader: a suspect leader leads, a dead or stopped one does not")
	}
	// A single voter is fine when the target is one, a warning below a
	// larger target (after 'node recover' doctor said OK).
	if got := quorumCheckFrom(&palyrav1.ListNodesResponse{Nodes: []*palyrav1.NodeInfo{v("a", "alive")}, TargetVoters: 1}); got.Status != "ok" {
		t.Errorf("one voter, target 1: %+v", got)
	}
	if got := quorumCheckFrom(&palyrav1.ListNodesResponse{Nodes: []*palyrav1.NodeInfo{v("a", "alive")}, TargetVoters: 3}); got.Status != "warn" || !strings.Contains(got.Fix, "palyra node join") {
		t.Errorf("one voter, target 3: %+v; want a warning saying to add a node", got)
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
