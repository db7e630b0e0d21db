package consensus

import (
	"slices"
	"testing"
)

// Which devices are a node's local operators: the one made when it paired
// (named for it, same pairing code), or, for the first node, the init
// device registered right after it (a few milliseconds later: each entry
// gets its proposer's clock; equal times were asked for and never
// matched, so removing the first node left its operator's key usable).
// Other operators, and other nodes' local operators, are not.
func TestLocalOperatorsOf(t *testing.T) {
	dev := func(id, name, by string, at int64) Member {
		return Member{Kind: "device", ID: id, Name: name, Operator: true, AddedBy: by, AddedAtMS: at}
	}
	joined := Member{Kind: "node", ID: "n-b", AddedBy: "pairing:p1"}
	first := Member{Kind: "node", ID: "n-a", AddedBy: "init", AddedAtMS: 100_000}
	oldFirst := Member{Kind: "node", ID: "n-o", AddedBy: "init", AddedAtMS: 50_000}
	plain := dev("d-4", "local operator on n-b", "pairing:p1", 0)
	plain.Operator = false
	devs := []Member{
		dev("d-1", "local operator on n-b", "pairing:p1", 0),
		dev("d-2", "local operator on n-b", "pairing:p2", 0),
		dev("d-3", "laptop", "pairing:p1", 0),
		plain,
		dev("d-5", "local operator", "init", 100_003), // the first node's, 3 ms after it
		dev("d-7", "local operator", "init", 50_002),  // an older cluster's, before a snapshot restore
		dev("d-8", "laptop", "init", 100_001),
	}
	ids := func(ms []Member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	for _, c := range []struct {
		node Member
		want []string
	}{
		{joined, []string{"d-1"}},
		{first, []string{"d-5"}},
		{oldFirst, []string{"d-7"}},
		{Member{Kind: "node", ID: "n-c"}, nil},
		{Member{Kind: "node", ID: "n-z", AddedBy: "init", AddedAtMS: 900_000}, nil}, // no init device within a minute
	} {
		if got := ids(LocalOperatorsOf(devs, c.node)); !slices.Equal(got, c.want) {
			t.Errorf("LocalOperatorsOf(%s by %q) = %v, want %v", c.node.ID, c.node.AddedBy, got, c.want)
		}
	}
}
