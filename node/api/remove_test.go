package api

import (
	"testing"

	"github.com/palyra-mesh/palyra/consensus"
)

// Which devices are a node's local operator: the one made when it paired
// (named for it, same pairing code), or the first node's (both "init").
// Other operators, and other nodes' local operators, are not.
func TestLocalOperatorOf(t *testing.T) {
	joined := consensus.Member{Kind: "node", ID: "n-b", AddedBy: "pairing:p1"}
	first := consensus.Member{Kind: "node", ID: "n-a", AddedBy: "init", AddedAtMS: 100}
	for _, c := range []struct {
		d    consensus.Member
		node consensus.Member
		id   string
		want bool
	}{
		{consensus.Member{ID: "d-1", Operator: true, AddedBy: "pairing:p1", Name: "local operator on n-b"}, joined, "n-b", true},
		{consensus.Member{ID: "d-2", Operator: true, AddedBy: "pairing:p2", Name: "local operator on n-b"}, joined, "n-b", false},
		{consensus.Member{ID: "d-3", Operator: true, AddedBy: "pairing:p1", Name: "laptop"}, joined, "n-b", false},
		{consensus.Member{ID: "d-4", Operator: false, AddedBy: "pairing:p1", Name: "local operator on n-b"}, joined, "n-b", false},
		{consensus.Member{ID: "d-5", Operator: true, AddedBy: "init", Name: "local operator", AddedAtMS: 100}, first, "n-a", true},
		{consensus.Member{ID: "d-5", Operator: true, AddedBy: "init", Name: "local operator", AddedAtMS: 100}, joined, "n-b", false},
		// After a snapshot restore: the old cluster's init operator is not
		// the restored node's.
		{consensus.Member{ID: "d-7", Operator: true, AddedBy: "init", Name: "local operator", AddedAtMS: 50}, first, "n-a", false},
		{consensus.Member{ID: "d-6", Operator: true, AddedBy: "", Name: "local operator on n-c"}, consensus.Member{ID: "n-c"}, "n-c", false},
	} {
		if got := localOperatorOf(c.d, c.id, c.node); got != c.want {
			t.Errorf("localOperatorOf(%s %q by %q, %s by %q) = %v, want %v", c.d.ID, c.d.Name, c.d.AddedBy, c.id, c.node.AddedBy, got, c.want)
		}
	}
}
