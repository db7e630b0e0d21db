package client

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

// PairOptions describe the member being paired.
type PairOptions struct {
	Name string // the member's name; "" takes the code's, else HostName
	// HostName names the member when neither Name nor the code does.
	HostName string
	Labels   map[string]string
	// LocalOperator (node codes) also asks for an operator credential for
	// this machine, returned in Paired.Operator.
	LocalOperator bool
}

// Paired is what a pairing gave this machine.
type Paired struct {
	Credential *identity.Credential
	// Operator is the node's local operator credential, when asked for
	// and granted.
	Operator *identity.Credential
	Response *palyrav1.PairResponse
}

// Pair joins the cluster that made code through the node at addr. It
// verifies the node against the CA fingerprint pinned in the code before
// sending anything, makes the key here (it never leaves this machine),
// sends only a CSR, and returns the new credential and the cluster's
// answer (peers, name).
func Pair(ctx context.Context, addr string, code pairing.Code, o PairOptions) (*identity.Credential, *palyrav1.PairResponse, error) {
	r, err := PairMember(ctx, addr, code, o)
	if err != nil {
		return nil, nil, err
	}
	return r.Credential, r.Response, nil
}

// PairMember is Pair with everything the pairing gave, the local
// operator credential included.
func PairMember(ctx context.Context, addr string, code pairing.Code, o PairOptions) (*Paired, error) {
	p := identity.Principal{Kind: code.Kind(), ID: identity.NewID(code.Kind())}
	key, csr, err := identity.NewKeyAndCSR(p)
	if err != nil {
		return nil, err
	}
	req := &palyrav1.PairRequest{
		PairingId: code.IDString(), Secret: code.Secret(), CsrDer: csr,
		Kind: string(p.Kind), MemberId: p.ID, Name: o.Name, HostName: o.HostName, Labels: o.Labels,
	}
	var opKey crypto.Signer
	if o.LocalOperator && code.Kind() == identity.KindNode {
		opP := identity.Principal{Kind: identity.KindDevice, ID: identity.NewID(identity.KindDevice)}
		if opKey, req.OperatorCsrDer, err = identity.NewKeyAndCSR(opP); err != nil {
			return nil, err
		}
		req.OperatorId = opP.ID
	}
	tr := &http3.Transport{
		TLSClientConfig: pairing.PinnedClientTLS(code, []string{http3.NextProtoH3}),
		QUICConfig:      &quic.Config{HandshakeIdleTimeout: 3 * time.Second},
	}
	defer tr.Close()
	c := &Client{Addr: addr}
	ic := palyrav1connect.NewIdentityServiceClient(&http.Client{Transport: tr}, "https://"+addr)
	resp, err := ic.Pair(ctx, connect.NewRequest(req))
	if errors.Is(err, pairing.ErrPinMismatch) {
		return nil, &Error{Code: "wrong_cluster",
			Message: fmt.Sprintf("the node at %s is not part of the cluster that made this code (its CA does not match the code's pin)", addr),
			Hint:    "check --peer: it must be a node of the cluster where 'palyra pair create' ran; if that cluster rotated its CA ('palyra ca rotate') after the code was made, the code pins the old root: create a new one ('palyra pair list' shows such codes as stale)"}
	}
	if err != nil {
		return nil, c.Explain(err)
	}
	// The answer's trust bundle must hold the pinned root; during a CA
	// rotation it also holds the new root the certificate comes from.
	bundle := resp.Msg.RootsDer
	if len(bundle) == 0 {
		bundle = [][]byte{resp.Msg.RootDer}
	}
	var pinned *x509.Certificate
	var also []*x509.Certificate
	for _, der := range bundle {
		root, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("node sent a bad root certificate: %w", err)
		}
		if pinned == nil && code.PinMatches(root.Raw) {
			pinned = root
		} else {
			also = append(also, root)
		}
	}
	if pinned == nil {
		return nil, fmt.Errorf("%w: the roots in the node's answer do not include the one pinned by the code", pairing.ErrPinMismatch)
	}
	cred, err := pairing.NewCredential(key, resp.Msg.ChainDer, pinned, also...)
	if err != nil {
		return nil, err
	}
	out := &Paired{Credential: cred, Response: resp.Msg}
	if opKey != nil && len(resp.Msg.OperatorChainDer) > 0 {
		if out.Operator, err = pairing.NewCredential(opKey, resp.Msg.OperatorChainDer, pinned, also...); err != nil {
			return nil, fmt.Errorf("the local operator credential: %w", err)
		}
	}
	return out, nil
}
