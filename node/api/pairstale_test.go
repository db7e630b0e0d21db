package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// 'pair list' calls a pending code stale once the CA root it pins is gone
// (made before the active root took over, the rotation's overlap ended):
// it listed such codes as pending, and each failed on every node with
// "not part of the cluster that made this code".
func TestPairingsPinningARetiredRootAreStale(t *testing.T) {
	active := consensus.CARoot{Fingerprint: "new", State: consensus.RootActive, ActivatedAtMS: 5000, CrossFrom: "old"}
	first := consensus.CARoot{Fingerprint: "first", State: consensus.RootActive, ActivatedAtMS: 5000}
	old := consensus.CARoot{Fingerprint: "old", State: consensus.RootRetiring, ActivatedAtMS: 100}
	before, after := &consensus.Pairing{CreatedAtMS: 4000}, &consensus.Pairing{CreatedAtMS: 6000}
	for _, c := range []struct {
		name  string
		p     *consensus.Pairing
		roots []consensus.CARoot
		want  bool
	}{
		{"made before the rotation, old root dropped", before, []consensus.CARoot{active}, true},
		{"made before the rotation, during the overlap", before, []consensus.CARoot{old, active}, false},
		{"made after the rotation", after, []consensus.CARoot{active}, false},
		{"no bundle yet", before, nil, false},
		// The first root's record can follow codes made while the cluster
		// started: those pin it, and it is no rotation's.
		{"made before the first root's record", before, []consensus.CARoot{first}, false},
	} {
		if got := pinsARetiredRoot(c.p, consensus.TrustBundle{Roots: c.roots}); got != c.want {
			t.Errorf("%s: stale %v, want %v", c.name, got, c.want)
		}
	}
}

// CreatePairing answers with the code's state as applied, pending (the
// console showed "unknown").
func TestCreatePairingAnswersPending(t *testing.T) {
	is, ctl, _, _ := pairingServer(t) // a real CA
	addMember(t, ctl, &raftpb.Member{Kind: "device", Id: "d-operator1", Operator: true, AddedAtMs: 1, AddedBy: "init"})
	ctx := context.WithValue(context.Background(), principalKey{}, identity.Principal{Kind: identity.KindDevice, ID: "d-operator1"})
	resp, err := is.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "device"}))
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Msg.Pairing.State; st != "pending" {
		t.Fatalf("a new code's state %q, want pending", st)
	}
}

// A cluster whose voters hold no key of its CA root (recovered from a node
// that never held it) refuses to make codes no one could use; pair
// create printed a code and every join failed with "retry shortly".
// A voter holding the key, or one not heard from (it may), lets it be.
func TestCreatePairingRefusedWhenNoVoterHoldsTheCAKey(t *testing.T) {
	is, ctl, issuer, _ := pairingServer(t)
	addMember(t, ctl, &raftpb.Member{Kind: "device", Id: "d-operator1", Operator: true, AddedAtMs: 1, AddedBy: "init"})
	ctx := context.WithValue(context.Background(), principalKey{}, identity.Principal{Kind: identity.KindDevice, ID: "d-operator1"})
	fp := issuer.Fingerprint()
	is.s.Issuer = nil // this node cannot sign
	is.s.info.CAFingerprint = fp
	for _, c := range []struct {
		name    string
		voter   cluster.Member
		refused bool
	}{
		{"the only voter holds no key", cluster.Member{ID: "n-1", Voter: true, State: cluster.StateAlive}, true},
		{"a voter holds it", cluster.Member{ID: "n-1", Voter: true, State: cluster.StateAlive, Labels: map[string]string{LabelCAKeys: "000000000000," + prefix(fp)}}, false},
		{"a voter not heard from", cluster.Member{ID: "n-1", Voter: true, State: cluster.StateDead}, false},
	} {
		is.s.Members = func() []cluster.Member {
			return []cluster.Member{c.voter, {ID: "n-2", State: cluster.StateAlive}} // n-2: a non-voter
		}
		_, err := is.CreatePairing(ctx, connect.NewRequest(&palyrav1.CreatePairingRequest{Kind: "node"}))
		if got := apiErr(err); c.refused != (err != nil) || (c.refused && (got.Code != "no_ca_key" || !strings.Contains(got.Hint, "snapshot restore"))) {
			t.Errorf("%s: %v, want refused %v (no_ca_key, naming snapshot restore)", c.name, err, c.refused)
		}
	}
}

// A size just over a limit does not read as the limit itself.
func TestMiBSaysBytesWhenRounded(t *testing.T) {
	if got := mib(1_100_000); got != "1.0 MiB (1100000 bytes)" {
		t.Errorf("mib(1100000) = %q", got)
	}
	if got := mib(1 << 20); got != "1.0 MiB" {
		t.Errorf("mib(1 MiB) = %q", got)
	}
}
