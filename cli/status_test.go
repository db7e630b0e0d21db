package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// status shows the voter target next to the voter count while the
// cluster is below it (in text and --json): one node started with the
// default target of three voters lacks two.
func TestStatusShowsTheVoterTargetBelowIt(t *testing.T) {
	c := startNode(t)
	r := c.cli("status")
	if r.code != 0 || !strings.Contains(r.stdout, "1 of 1 alive (target 3: add 2 nodes to reach it)") {
		t.Fatalf("status: %+v", r)
	}
	r = c.cli("status", "--json")
	var st struct {
		Voters struct {
			Total, Alive, Target, Spares *int
		} `json:"voters"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: %v %+v", err, r)
	}
	if v := st.Voters; v.Total == nil || *v.Total != 1 || v.Target == nil || *v.Target != 3 || v.Spares == nil || *v.Spares != 0 {
		t.Fatalf("status --json voters: %s", r.stdout)
	}
}
