package api

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// fakeControl is an in-memory control plane for handler fuzzing: it runs
// commands through a real FSM (no raft), so the pairing rules are the
// product's own.
type fakeControl struct {
	mu  sync.Mutex
	fsm *consensus.FSM
	idx uint64
}

func (f *fakeControl) State() State { return f.fsm.State() }
func (f *fakeControl) Apply(_ context.Context, cmd *raftpb.Command) (consensus.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := proto.Marshal(cmd)
	if err != nil {
		return consensus.Job{}, err
	}
	f.idx++
	res := f.fsm.Apply(rlog(f.idx, data)).(consensus.ApplyResult)
	return res.Job, res.Err
}
func (f *fakeControl) VerifyRead(context.Context) error { return nil }
func (f *fakeControl) Leader() (string, string)         { return "", "n-fake" }
func (f *fakeControl) Stats() consensus.Stats           { return consensus.Stats{} }
func (f *fakeControl) AllSupport(string) bool           { return true }
func (f *fakeControl) SeenSupport(string) bool          { return true }
func (f *fakeControl) Lacking(string) []string          { return nil }

// countingIssuer wraps the real CA and counts the certificates it issued;
// failNext makes the next signatures fail as a CA that cannot sign would.
type countingIssuer struct {
	*identity.CA
	mu       sync.Mutex
	signs    int
	failNext int
}

func (c *countingIssuer) CanSign() bool              { return true }
func (c *countingIssuer) Roots() []*x509.Certificate { return []*x509.Certificate{c.CA.Root()} }

func (c *countingIssuer) Sign(ctx context.Context, csr []byte, p identity.Principal, ttl time.Duration) ([]*x509.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failNext > 0 {
		c.failNext--
		return nil, errors.New("injected signing failure")
	}
	chain, err := c.CA.Sign(ctx, csr, p, ttl)
	if err == nil {
		c.signs++
	}
	return chain, err
}

// FuzzPairRequest feeds arbitrary pairing requests to the Pair handler (the
// one call open without a certificate): it never panics, never signs for a
// request whose code was not valid, and a valid code works once.
func FuzzPairRequest(f *testing.F) {
	dir := f.TempDir()
	ca, err := identity.InitCA(dir, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	defer ca.Close()
	ctl := &fakeControl{fsm: consensus.NewFSM()}
	authz, err := NewAuthorizer(ctl.State(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}
	issuer := &countingIssuer{CA: ca}
	srv := New(Options{Control: ctl, Authz: authz, Issuer: issuer, Info: Info{CAFingerprint: ca.Fingerprint()},
		Limiter: pairing.NewLimiter(pairing.LimiterConfig{PerSource: 1e9, PerSourceBurst: 1 << 30, Global: 1e9, GlobalBurst: 1 << 30}),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))})

	// One real code, registered like CreatePairing does.
	code, err := pairing.New(identity.KindDevice, ca.Fingerprint())
	if err != nil {
		f.Fatal(err)
	}
	rec, _ := code.Record("device:d-op", time.Now().UnixMilli(), time.Hour)
	p := consensus.Pairing{ID: rec.ID, Kind: rec.Kind, SecretHash: rec.SecretHash, CreatedAtMS: time.Now().UnixMilli(), ExpiresAtMS: rec.ExpiresAtMS}
	if _, err := ctl.Apply(context.Background(), &raftpb.Command{Cmd: &raftpb.Command_CreatePairing{CreatePairing: &raftpb.CreatePairing{Pairing: consensus.PairingPB(&p)}}}); err != nil {
		f.Fatal(err)
	}
	id := identity.Principal{Kind: identity.KindDevice, ID: "d-fuzz0001"}
	_, csr, _ := identity.NewKeyAndCSR(id)
	good, _ := proto.Marshal(&palyrav1.PairRequest{PairingId: code.IDString(), Secret: code.Secret(), CsrDer: csr, Kind: "device", MemberId: id.ID})
	bad, _ := proto.Marshal(&palyrav1.PairRequest{PairingId: code.IDString(), Secret: []byte("wrong"), CsrDer: csr, Kind: "device", MemberId: "d-fuzz0002"})
	f.Add(good)
	f.Add(bad)
	f.Add([]byte{})
	f.Add([]byte("\x0a\x05AAAAA\x12\x08secret!!"))

	is := identityService{srv}
	var mu sync.Mutex
	f.Fuzz(func(t *testing.T, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		var req palyrav1.PairRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		before := issuer.signs
		usedBefore := used(ctl)
		r := connect.NewRequest(&req)
		resp, err := is.Pair(context.Background(), r)
		signed := issuer.signs - before
		switch {
		case err == nil && (resp == nil || len(resp.Msg.ChainDer) == 0):
			t.Fatal("success without a certificate")
		case err != nil && signed > 0:
			t.Fatalf("signed a certificate for a refused request: %v", err)
		case err == nil && used(ctl) != usedBefore+1:
			t.Fatal("a certificate was issued without consuming a code")
		case err != nil && used(ctl) != usedBefore:
			t.Fatalf("a refused request consumed a code: %v", err)
		}
		var ce *connect.Error
		if err != nil && !errors.As(err, &ce) {
			t.Fatalf("error is not an API error: %v", err)
		}
	})
}

func used(c *fakeControl) int {
	n := 0
	for _, p := range c.State().Pairings() {
		if p.State == consensus.PairingUsed {
			n++
		}
	}
	return n
}

func rlog(i uint64, data []byte) *raft.Log {
	return &raft.Log{Index: i, Type: raft.LogCommand, Data: data}
}
