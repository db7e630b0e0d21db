package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// pairingServer is a Pair handler over a real FSM and a real CA.
func pairingServer(t *testing.T) (identityService, *fakeControl, *countingIssuer, pairing.Code) {
	t.Helper()
	ca, err := identity.InitCA(t.TempDir(), "atomic")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close() })
	ctl := &fakeControl{fsm: consensus.NewFSM()}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	authz, err := NewAuthorizer(ctl.State(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	issuer := &countingIssuer{CA: ca}
	srv := New(Options{Control: ctl, Authz: authz, Issuer: issuer, Logger: quiet,
		Limiter: pairing.NewLimiter(pairing.LimiterConfig{PerSource: 1e9, PerSourceBurst: 1 << 30, Global: 1e9, GlobalBurst: 1 << 30})})
	code, err := pairing.New(identity.KindDevice, ca.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	rec, _ := code.Record("device:d-op", now, time.Hour)
	p := consensus.Pairing{ID: rec.ID, Kind: rec.Kind, SecretHash: rec.SecretHash, CreatedAtMS: now, ExpiresAtMS: rec.ExpiresAtMS}
	if _, err := ctl.Apply(context.Background(), &raftpb.Command{Cmd: &raftpb.Command_CreatePairing{CreatePairing: &raftpb.CreatePairing{Pairing: consensus.PairingPB(&p)}}}); err != nil {
		t.Fatal(err)
	}
	return identityService{srv}, ctl, issuer, code
}

func pairReq(code pairing.Code, id string, csr []byte) *connect.Request[palyrav1.PairRequest] {
	return connect.NewRequest(&palyrav1.PairRequest{PairingId: code.IDString(), Secret: code.Secret(), CsrDer: csr, Kind: "device", MemberId: id})
}

// apiErr is the {code, message, hint} an API error carries.
func apiErr(err error) *palyrav1.Error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return &palyrav1.Error{}
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if pe, ok := v.(*palyrav1.Error); ok {
				return pe
			}
		}
	}
	return &palyrav1.Error{Code: ce.Code().String(), Message: ce.Message()}
}

// p384CSR is a well-formed, correctly self-signed CSR whose key the CA
// refuses (it issues P-256 only): it passes the handler's own checks and
// fails at signing.
func p384CSR(t *testing.T, id string) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: id}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

// A pairing whose signature fails consumes nothing: the code stays
// pending, no member is registered, and the same code then pairs. Before
// pairing was atomic the first failure burnt the code and left a member
// without a certificate.
func TestPairingFailedSignatureKeepsTheCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(t *testing.T, is identityService, issuer *countingIssuer, code pairing.Code) error
	}{
		{"signing unavailable", func(t *testing.T, is identityService, issuer *countingIssuer, code pairing.Code) error {
			issuer.failNext = 1
			_, csr, _ := identity.NewKeyAndCSR(identity.Principal{Kind: identity.KindDevice, ID: "d-0000fa11"})
			_, err := is.Pair(context.Background(), pairReq(code, "d-0000fa11", csr))
			return err
		}},
		{"CSR the CA refuses", func(t *testing.T, is identityService, issuer *countingIssuer, code pairing.Code) error {
			_, err := is.Pair(context.Background(), pairReq(code, "d-0000fa11", p384CSR(t, "d-0000fa11")))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is, ctl, issuer, code := pairingServer(t)
			err := tc.fail(t, is, issuer, code)
			if err == nil {
				t.Fatal("the failing pairing succeeded")
			}
			if used(ctl) != 0 {
				t.Fatalf("the failed pairing consumed the code: %v", ctl.State().Pairings())
			}
			if _, ok := ctl.State().Member("device", "d-0000fa11"); ok {
				t.Fatal("the failed pairing registered a member with no certificate")
			}
			if e := apiErr(err); !strings.Contains(e.Hint, "not used") {
				t.Errorf("error %+v does not say the code can be used again", e)
			}

			// The same code pairs now.
			key, csr, _ := identity.NewKeyAndCSR(identity.Principal{Kind: identity.KindDevice, ID: "d-00000a0c"})
			resp, err := is.Pair(context.Background(), pairReq(code, "d-00000a0c", csr))
			if err != nil {
				t.Fatalf("pairing again with the same code: %v", err)
			}
			cred, err := pairing.NewCredential(key, resp.Msg.ChainDer, issuer.Root())
			if err != nil || cred.Principal.ID != "d-00000a0c" {
				t.Fatalf("credential from the retry: %v %v", cred, err)
			}
			if used(ctl) != 1 || issuer.signs != 1 {
				t.Fatalf("after the retry: %d codes used, %d certificates issued; want 1 and 1", used(ctl), issuer.signs)
			}
			if m, ok := ctl.State().Member("device", "d-00000a0c"); !ok || m.AddedBy != "pairing:"+code.IDString() {
				t.Fatalf("member after the retry: %+v %v", m, ok)
			}

			// And only once.
			_, csr, _ = identity.NewKeyAndCSR(identity.Principal{Kind: identity.KindDevice, ID: "d-00000b0d"})
			if _, err := is.Pair(context.Background(), pairReq(code, "d-00000b0d", csr)); err == nil || !strings.Contains(err.Error(), "already used") {
				t.Fatalf("a third pairing with the code: %v; want 'already used'", err)
			}
			if issuer.signs != 1 {
				t.Fatalf("the refused third pairing was signed (%d certificates)", issuer.signs)
			}
		})
	}
}

// A wrong secret is refused before anything is signed, and still counts
// against the code.
func TestPairingWrongSecretSignsNothing(t *testing.T) {
	is, ctl, issuer, code := pairingServer(t)
	_, csr, _ := identity.NewKeyAndCSR(identity.Principal{Kind: identity.KindDevice, ID: "d-0000bad0"})
	req := pairReq(code, "d-0000bad0", csr)
	req.Msg.Secret = []byte("not the secret")
	if _, err := is.Pair(context.Background(), req); err == nil || apiErr(err).Code != consensus.ErrInvalid.Code {
		t.Fatalf("wrong secret: %v (%+v)", err, apiErr(err))
	}
	if issuer.signs != 0 || used(ctl) != 0 {
		t.Fatalf("wrong secret: %d signed, %d used", issuer.signs, used(ctl))
	}
	if p := ctl.State().Pairings()[0]; p.Failures != 1 {
		t.Fatalf("failures = %d, want the wrong secret counted", p.Failures)
	}
}
