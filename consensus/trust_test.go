package consensus

import (
	"bytes"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

func trustCmd(at int64, t *raftpb.CATrust) *raftpb.Command {
	t.AtMs, t.By = at, "device:d-op"
	return &raftpb.Command{Cmd: &raftpb.Command_CaTrust{CaTrust: t}}
}

func caInit(at int64, der string) *raftpb.Command {
	return trustCmd(at, &raftpb.CATrust{Op: &raftpb.CATrust_Init{Init: &raftpb.CAInitRoot{Der: []byte(der)}}})
}
func caRequest(at, overlap int64) *raftpb.Command {
	return trustCmd(at, &raftpb.CATrust{Op: &raftpb.CATrust_Request{Request: &raftpb.CARequestRotation{OverlapMs: overlap}}})
}
func caPending(at int64, der, from string) *raftpb.Command {
	return trustCmd(at, &raftpb.CATrust{Op: &raftpb.CATrust_Pending{Pending: &raftpb.CAAddPending{Der: []byte(der), CrossDer: []byte("x-" + der), CrossFrom: from}}})
}
func caActivate(at int64, der string) *raftpb.Command {
	return trustCmd(at, &raftpb.CATrust{Op: &raftpb.CATrust_Activate{Activate: &raftpb.CAActivate{Fingerprint: RootFingerprint([]byte(der))}}})
}
func caDrop(at int64, der string) *raftpb.Command {
	return trustCmd(at, &raftpb.CATrust{Op: &raftpb.CATrust_Drop{Drop: &raftpb.CADropRoot{Fingerprint: RootFingerprint([]byte(der))}}})
}

// A rotation goes request → pending → activate → drop, each step refused
// out of turn, and the bundle always has exactly one active root.
func TestTrustBundleRotation(t *testing.T) {
	f := NewFSM()
	r1, r2, r3 := "root-1", "root-2", "root-3"
	fp1 := RootFingerprint([]byte(r1))
	res := applyAll(t, f,
		caRequest(10, 1000),        // 0: nothing recorded yet
		caInit(10, r1),             // 1
		caInit(11, r2),             // 2: already initialised
		caPending(20, r2, fp1),     // 3: no rotation requested
		caRequest(30, 1000),        // 4
		caRequest(31, 1000),        // 5: one at a time
		caActivate(32, r2),         // 6: not the pending root
		caPending(40, r2, "other"), // 7: cross-certificate from another root
		caPending(40, r2, fp1),     // 8
		caPending(45, r3, fp1),     // 9: a newer pending root replaces a lost one
		caActivate(50, r2),         // 10: replaced
		caActivate(50, r3),         // 11
		caRequest(60, 1000),        // 12: the old root still retires
		caDrop(1049, r1),           // 13: overlap not over
		caDrop(1050, r1),           // 14
		caDrop(1050, r1),           // 15: gone
		caRequest(1100, 1000),      // 16: a new rotation may start
	)
	want := []string{"no CA root recorded", "", "already initialised", "no CA rotation was requested", "",
		"is in progress", "is not the pending root", "cross-certificate", "", "", "is not the pending root", "",
		"still trusted until", "cannot be dropped now", "", "no root", ""}
	for i, w := range want {
		got := ""
		if res[i].Err != nil {
			got = res[i].Err.Error()
		}
		if (w == "") != (got == "") || !strings.Contains(got, w) {
			t.Errorf("command %d: got %q, want %q", i, got, w)
		}
	}
	b := f.State().Trust()
	if len(b.Roots) != 1 || b.Roots[0].Fingerprint != RootFingerprint([]byte(r3)) || b.Roots[0].State != RootActive || b.Rotation == nil {
		t.Fatalf("bundle after the rotation: %+v", b)
	}
	if a, _ := b.Active(); a.ActivatedAtMS != 50 || a.CrossFrom != fp1 || !bytes.Equal(a.CrossDER, []byte("x-"+r3)) {
		t.Fatalf("active root: %+v", a)
	}
}

// The bundle, mid-rotation, survives a snapshot and restore unchanged.
func TestTrustBundleSnapshot(t *testing.T) {
	f := NewFSM()
	fp1 := RootFingerprint([]byte("r1"))
	applyAll(t, f, caInit(1, "r1"), caRequest(2, 500), caPending(3, "r2", fp1), caActivate(4, "r2"), caRequest(5, 500))
	want := f.State().Trust()
	if len(want.Roots) != 2 || want.Rotation != nil {
		// caRequest(5) is refused while r1 retires: the rotation stays nil.
		t.Fatalf("setup: %+v", want)
	}
	applyAll(t, f, caDrop(504, "r1"), caRequest(600, 500), caPending(601, "r3", RootFingerprint([]byte("r2"))))
	want = f.State().Trust()
	g := NewFSM()
	restore(t, f, g)
	got := g.State().Trust()
	if len(got.Roots) != len(want.Roots) || got.Rotation == nil || *got.Rotation != *want.Rotation {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
	for i := range want.Roots {
		w, g := want.Roots[i], got.Roots[i]
		if w.Fingerprint != g.Fingerprint || w.State != g.State || !bytes.Equal(w.DER, g.DER) || !bytes.Equal(w.CrossDER, g.CrossDER) ||
			w.CrossFrom != g.CrossFrom || w.AddedAtMS != g.AddedAtMS || w.ActivatedAtMS != g.ActivatedAtMS || w.RetireAtMS != g.RetireAtMS {
			t.Fatalf("root %d restored as %+v, want %+v", i, g, w)
		}
	}
}
