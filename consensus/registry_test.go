package consensus

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// applyAll feeds commands to an FSM as consecutive log entries.
func applyAll(t *testing.T, f *FSM, cmds ...*raftpb.Command) []ApplyResult {
	t.Helper()
	var out []ApplyResult
	for _, c := range cmds {
		data, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		idx := f.State().AppliedIndex() + 1
		out = append(out, f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: data}).(ApplyResult))
	}
	return out
}

func hash(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

func createPairing(id, kind, secret string, expires int64) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_CreatePairing{CreatePairing: &raftpb.CreatePairing{Pairing: &raftpb.PairingRecord{
		Id: id, Kind: kind, SecretHash: hash(secret), CreatedAtMs: 1000, ExpiresAtMs: expires, CreatedBy: "device:d-op", Operator: true}}}}
}

func consume(id, secret string, at int64, kind, memberID string) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_ConsumePairing{ConsumePairing: &raftpb.ConsumePairing{
		Id: id, PresentedSecretHash: hash(secret), AtMs: at, Member: &raftpb.Member{Kind: kind, Id: memberID}}}}
}

func TestPairingIsOneTimeAndExpires(t *testing.T) {
	f := NewFSM()
	res := applyAll(t, f,
		createPairing("p1", "device", "s3cret", 10_000),
		consume("p1", "wrong", 2000, "device", "d-1"),
		consume("p1", "s3cret", 2000, "node", "n-1"), // code is for a device
		consume("p1", "s3cret", 2000, "device", "d-1"),
		consume("p1", "s3cret", 2000, "device", "d-2"), // reuse
		// Proposed at 1000 after the cluster clock reached 2000: the FSM
		// moves it (and its expiry, to 6000) to the clock.
		createPairing("p2", "node", "x", 5_000),
		consume("p2", "x", 6_000+3*60_000, "node", "n-2"), // expired 3m ago
		consume("nope", "x", 1, "node", "n-3"),
	)
	want := []string{"", "wrong secret", "is for a device", "", "already used", "", "expired 3m ago", "no pairing code"}
	for i, w := range want {
		got := ""
		if res[i].Err != nil {
			got = res[i].Err.Error()
		}
		if (w == "") != (got == "") || !strings.Contains(got, w) {
			t.Errorf("command %d: got %q, want %q", i, got, w)
		}
	}
	m, ok := f.State().Member("device", "d-1")
	if !ok || !m.Operator || m.AddedBy != "pairing:p1" || m.AddedAtMS != 2000 {
		t.Fatalf("member: %+v %v", m, ok)
	}
	if _, ok := f.State().Member("device", "d-2"); ok {
		t.Fatal("reused code registered a second device")
	}
	if _, ok := f.State().Member("node", "n-2"); ok {
		t.Fatal("expired code registered a node")
	}
	var ce *Error
	if !errors.As(res[4].Err, &ce) || ce.Hint == "" {
		t.Fatalf("reuse error lacks a hint: %v", res[4].Err)
	}
	// Who used the code is told only to whoever holds its secret: the
	// public id alone named the device that paired with it.
	if !strings.Contains(res[4].Err.Error(), "(by device:d-1)") {
		t.Errorf("reuse with the secret: %v, want it to name who used the code", res[4].Err)
	}
	guess := applyAll(t, f, consume("p1", "guess", 3000, "device", "d-3"))[0].Err
	if guess == nil || !strings.Contains(guess.Error(), "already used") || strings.Contains(guess.Error(), "d-1") {
		t.Errorf("reuse without the secret: %v, want 'already used' naming no one", guess)
	}
}

// A joining node's local operator is added with it, in the same command,
// as an operator device; a device code grants none, and a dry run adds
// nothing.
func TestNodePairingAddsItsLocalOperator(t *testing.T) {
	f := NewFSM()
	withOp := func(c *raftpb.Command, opID string, dry bool) *raftpb.Command {
		c.GetConsumePairing().LocalOperator = &raftpb.Member{Kind: "device", Id: opID}
		c.GetConsumePairing().DryRun = dry
		return c
	}
	res := applyAll(t, f,
		createPairing("d", "device", "s", 1e9),
		withOp(consume("d", "s", 10, "device", "d-dev"), "d-op0", false), // device codes grant none
		createPairing("n", "node", "s", 1e9),
		withOp(consume("n", "s", 10, "node", "n-1"), "d-op1", true),
		withOp(consume("n", "s", 10, "node", "n-1"), "d-op1", false),
	)
	if res[1].Err == nil || !strings.Contains(res[1].Err.Error(), "only joining nodes") {
		t.Fatalf("device code with a local operator: %v", res[1].Err)
	}
	if _, ok := f.State().Member("device", "d-op0"); ok {
		t.Fatal("a device code registered a local operator")
	}
	if res[3].Err != nil || res[4].Err != nil {
		t.Fatalf("node pairing: %v %v", res[3].Err, res[4].Err)
	}
	if _, ok := f.State().Member("node", "n-1"); !ok {
		t.Fatal("node not registered")
	}
	op, ok := f.State().Member("device", "d-op1")
	if !ok || !op.Operator || op.AddedBy != "pairing:n" || !strings.Contains(op.Name, "n-1") {
		t.Fatalf("local operator: %+v %v", op, ok)
	}
}

func TestWrongSecretsRevokeTheCode(t *testing.T) {
	f := NewFSM()
	applyAll(t, f, createPairing("p", "node", "right", 1e9))
	for i := 0; i < maxPairingFailures; i++ {
		applyAll(t, f, consume("p", "guess", 10, "node", "n-x"))
	}
	r := applyAll(t, f, consume("p", "right", 10, "node", "n-x"))
	if r[0].Err == nil || !strings.Contains(r[0].Err.Error(), "revoked") {
		t.Fatalf("code still usable after %d wrong guesses: %v", maxPairingFailures, r[0].Err)
	}
}

func TestTokensAreOneTimeAndPruned(t *testing.T) {
	f := NewFSM()
	use := func(id string, at int64) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_UseToken{UseToken: &raftpb.UseToken{Id: id, AtMs: at}}}
	}
	r := applyAll(t, f, use("t1", 0), use("t1", 1), use("t2", tokenRetentionMS+10))
	if r[0].Err != nil || !errors.Is(r[1].Err, ErrConflict) || r[2].Err != nil {
		t.Fatalf("token results: %v %v %v", r[0].Err, r[1].Err, r[2].Err)
	}
	if f.State().TokenUsed("t1") {
		t.Fatal("old token not pruned")
	}
}

func TestRevocationAndPolicy(t *testing.T) {
	f := NewFSM()
	r := applyAll(t, f,
		&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "device", Id: "d-9"}}}},
		&raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{Kind: "device", Id: "d-9", AtMs: 5, By: "device:d-op"}}},
		&raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{Kind: "device", Id: "d-9"}}},
		&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "device", Id: "d-9"}}}},
		&raftpb.Command{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{Source: []byte("permit(principal,action,resource);"), By: "x"}}},
	)
	if r[0].Err != nil || r[1].Err != nil || !errors.Is(r[2].Err, ErrConflict) || !errors.Is(r[3].Err, ErrConflict) || r[4].Err != nil {
		t.Fatalf("results: %v", r)
	}
	if !f.State().IsRevoked("device", "d-9") || f.State().IsRevoked("device", "d-other") {
		t.Fatal("revocation state wrong")
	}
	if p := f.State().Policy(); p.Version != 1 || !bytes.Contains(p.Source, []byte("permit")) {
		t.Fatalf("policy %+v", p)
	}
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

type memSink struct{ bytes.Buffer }

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

// Two replicas applying the same log end byte-identical, and a snapshot
// restores to the same state.
func TestDeterministicReplicasAndSnapshotRoundTrip(t *testing.T) {
	log := []*raftpb.Command{
		submit("a"), submit("b"), assign("a", 1, "n1"), finish("a", 1, "n1", "out"),
		createPairing("p1", "device", "s", 1e9), consume("p1", "s", 5, "device", "d-1"),
		createPairing("p2", "node", "s", 1e9),
		{Cmd: &raftpb.Command_UseToken{UseToken: &raftpb.UseToken{Id: "tok", AtMs: 1}}},
		{Cmd: &raftpb.Command_RevokeCert{RevokeCert: &raftpb.RevokeCert{Serial: "123"}}},
		{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{Source: []byte("p")}}},
	}
	f1, f2 := NewFSM(), NewFSM()
	applyAll(t, f1, log...)
	applyAll(t, f2, log...)
	s1, s2 := snapshotBytes(t, f1), snapshotBytes(t, f2)
	if !bytes.Equal(s1, s2) {
		t.Fatal("replicas diverged")
	}
	f3 := NewFSM()
	if err := f3.Restore(io.NopCloser(bytes.NewReader(s1))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, f3), s1) {
		t.Fatal("restore lost state")
	}
	if !f3.State().TokenUsed("tok") || !f3.State().IsSerialRevoked("123") || len(f3.State().Pairings()) != 2 {
		t.Fatal("identity plane not restored")
	}
	if j, _ := f3.State().Job("a"); j.Phase != PhaseCompleted || string(j.Stdout) != "out" {
		t.Fatalf("job not restored: %+v", j)
	}
}

func restore(t *testing.T, from, to *FSM) {
	t.Helper()
	if err := to.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, from)))); err != nil {
		t.Fatal(err)
	}
}
