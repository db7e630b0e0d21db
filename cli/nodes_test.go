package cli

import (
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
	} {
		h := votersHealth(c.nodes)
		if h.String() != c.want || h.tolerance() != c.tol {
			t.Errorf("%q (tolerance %d), want %q (%d)", h.String(), h.tolerance(), c.want, c.tol)
		}
	}
}
