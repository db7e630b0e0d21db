package node

import (
	"testing"

	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/node/cluster"
)

// A blob counts as held elsewhere only while a peer that acknowledged it
// is alive, as the member list says, whether liveness is read from the
// list (the default) or asked of the cluster one member at a time.
func TestHeldByLivePeer(t *testing.T) {
	store, err := blob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{"n-self": cluster.StateAlive, "n-b": cluster.StateAlive, "n-c": cluster.StateDead}
	members := func() []cluster.Member {
		var out []cluster.Member
		for id, st := range states {
			out = append(out, cluster.Member{ID: id, State: st})
		}
		return out
	}
	b := newBlobNet(store, nil, "n-self", members, nil)
	const h = "0000000000000000000000000000000000000000000000000000000000000001"
	check := func(what string, want bool) {
		t.Helper()
		if got := b.heldByLive(h); got != want {
			t.Fatalf("%s: heldByLive %v, want %v", what, got, want)
		}
		if got := b.heldBy(h, b.others()); got != want {
			t.Fatalf("%s: heldBy over the list %v, want %v", what, got, want)
		}
	}
	check("never pushed", false)
	b.addHolder(h, "n-self")
	check("held by this node only", false)
	b.addHolder(h, "n-c")
	check("held by a dead peer", false)
	b.addHolder(h, "n-b")
	check("held by a live peer", true)
	states["n-b"] = cluster.StateLeft
	check("its holder left", false)
	states["n-c"] = cluster.StateAlive
	check("a holder back", true)
}
