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
