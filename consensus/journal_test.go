package consensus

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// TestJournalChain: security-relevant commands append a hash chain that
// is the same on every replica, survives a snapshot, detects an altered
// record, and keeps verifying after old records are folded into the base.
func TestJournalChain(t *testing.T) {
	cmds := []*raftpb.Command{
		{Cmd: &raftpb.Command_SetSecret{SetSecret: &raftpb.SetSecret{Name: "tok", Sealed: []byte("x"), AtMs: 10, By: "device:d-op"}}},
		{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{Source: []byte("permit(principal,action,resource);"), AtMs: 20, By: "device:d-op"}}},
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k1"}, AtMs: 30, By: "device:d-op"}),
		{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{Kind: "device", Id: "d-x", AtMs: 40, By: "device:d-op"}}},
		submitWith("j", func(*raftpb.JobRecord) {}), // not security-relevant: no record
		{Cmd: &raftpb.Command_DeleteSecret{DeleteSecret: &raftpb.DeleteSecret{Name: "tok", AtMs: 50, By: "device:d-op"}}},
		{Cmd: &raftpb.Command_DeleteSecret{DeleteSecret: &raftpb.DeleteSecret{Name: "tok", AtMs: 60, By: "device:d-op"}}}, // refused: no record
	}
	a, b := NewFSM(), NewFSM()
	applyAll(t, a, cmds...)
	applyAll(t, b, cmds...)
	recs, base, _, _ := a.State().Journal(0, 0, 100)
	var actions []string
	for _, r := range recs {
		actions = append(actions, r.Action)
	}
	if base != 0 || len(recs) != 4 || actions[0] != "secret.set" || actions[1] != "policy.set" || actions[2] != "skill.trust" || actions[3] != "secret.delete" {
		t.Fatalf("journal: %v", actions)
	}
	// RevokeMember of an unknown member is refused, so no record for it.
	ha, hashA := a.State().JournalHead()
	hb, hashB := b.State().JournalHead()
	if ha != hb || hashA != hashB || ha != 4 {
		t.Fatalf("replicas disagree: %d %s vs %d %s", ha, hashA, hb, hashB)
	}
	if n, bad, why := a.State().VerifyJournal(); n != 4 || bad != 0 {
		t.Fatalf("verify: %d %d %s", n, bad, why)
	}

	// A snapshot carries it.
	c := NewFSM()
	if err := c.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, a)))); err != nil {
		t.Fatal(err)
	}
	if hc, hashC := c.State().JournalHead(); hc != ha || hashC != hashA {
		t.Fatalf("restored head %d %s, want %d %s", hc, hashC, ha, hashA)
	}

	// An altered record is found, by its seq.
	st := c.State()
	st.journal.records[1] = &raftpb.AuditRecord{Seq: 2, AtMs: 20, Actor: "device:d-mallory", Action: "policy.set", Subject: "policy",
		Detail: st.journal.records[1].Detail, PrevSha256: st.journal.records[1].PrevSha256, Sha256: st.journal.records[1].Sha256}
	if _, bad, why := st.VerifyJournal(); bad != 2 {
		t.Fatalf("altered record: bad=%d %s", bad, why)
	}

	// Folding: past MaxJournal the oldest records become the base, and
	// the rest still verify against it.
	f := NewFSM()
	s := f.State()
	s.mu.Lock()
	for i := 0; i < MaxJournal+10; i++ {
		s.audit(int64(i), "device:d-op", "secret.set", "secret:x", "")
	}
	s.mu.Unlock()
	recs, base, baseHash, _ := s.Journal(0, 0, 1)
	if base != 10 || baseHash == "" || recs[0].Seq != 11 || recs[0].PrevSha256 != baseHash {
		t.Fatalf("after folding: base %d, first %d", base, recs[0].Seq)
	}
	if n, bad, why := s.VerifyJournal(); n != MaxJournal || bad != 0 {
		t.Fatalf("verify after folding: %d %d %s", n, bad, why)
	}
}

// The journal records what a pairing applied: the device's operator flag
// comes from the code (the request's flag is ignored), and a joining
// node's local operator device, added by the same command, gets a
// member.add record of its own.
func TestJournalRecordsWhatPairingApplied(t *testing.T) {
	f := NewFSM()
	asks := consume("d", "s", 2000, "device", "d-1") // the request says operator=false
	local := consume("n", "s", 3000, "node", "n-1")
	local.GetConsumePairing().LocalOperator = &raftpb.Member{Kind: "device", Id: "d-op1"}
	res := applyAll(t, f,
		createPairing("d", "device", "s", 1e9), // an operator code
		asks,
		createPairing("n", "node", "s", 1e9),
		local,
	)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("command %d: %v", i, r.Err)
		}
	}
	if m, _ := f.State().Member("device", "d-1"); !m.Operator {
		t.Fatal("setup: the device is no operator")
	}
	recs, _, _, _ := f.State().Journal(0, 0, 100)
	var got []string
	for _, r := range recs {
		got = append(got, r.Actor+" "+r.Action+" "+r.Subject+" "+r.Detail)
	}
	want := []string{
		"device:d-op pairing.create pairing:d kind=device operator",
		"device:d-1 pairing.consume pairing:d paired device d-1 operator=true",
		"device:d-op pairing.create pairing:n kind=node operator",
		"node:n-1 pairing.consume pairing:n paired node n-1 operator=false",
		"node:n-1 member.add device:d-op1 operator=true local operator of node:n-1 (pairing:n)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("journal:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n, bad, why := f.State().VerifyJournal(); n != len(want) || bad != 0 {
		t.Fatalf("verify: %d %d %s", n, bad, why)
	}
}
