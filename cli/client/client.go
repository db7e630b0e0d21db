// Package client is the Go client of a Palyra node's API: Connect over
// HTTP/3 (QUIC) with the caller's mTLS credential. The CLI uses only this
// to talk to nodes.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

// DefaultAddr is where a local node listens by default.
const DefaultAddr = "127.0.0.1:7444"

// Client talks to one node.
type Client struct {
	Addr     string
	Jobs     palyrav1connect.JobServiceClient
	Node     palyrav1connect.NodeServiceClient
	Identity palyrav1connect.IdentityServiceClient
	Policy   palyrav1connect.PolicyServiceClient
	Secrets  palyrav1connect.SecretServiceClient
	// Snapshots streams cluster snapshots (palyra snapshot save).
	Snapshots palyrav1connect.SnapshotServiceClient
	tr        *http3.Transport
}

// New returns a client for the node at addr using cred. No connection is
// made until the first call.
func New(addr string, cred *identity.Credential) (*Client, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("bad node address %q: want HOST:PORT, e.g. %s", addr, DefaultAddr)
	}
	tr := &http3.Transport{
		TLSClientConfig: identity.ClientTLSConfig(cred, []string{http3.NextProtoH3}, nil),
		QUICConfig: &quic.Config{
			HandshakeIdleTimeout: 3 * time.Second,
			MaxIdleTimeout:       30 * time.Second,
			KeepAlivePeriod:      10 * time.Second,
		},
	}
	hc := &http.Client{Transport: tr}
	base := "https://" + addr
	// Sends are bounded by the largest request a node takes (a module plus
	// a job array's inputs, node/api.MaxRequestBytes); requests under 64 KiB
	// go uncompressed (gzip costs more CPU than it saves on small messages).
	opts := []connect.ClientOption{connect.WithReadMaxBytes(64 << 20), connect.WithSendMaxBytes(96 << 20), connect.WithCompressMinBytes(64 << 10)}
	return &Client{
		Addr:      addr,
		Jobs:      palyrav1connect.NewJobServiceClient(hc, base, opts...),
		Node:      palyrav1connect.NewNodeServiceClient(hc, base, opts...),
		Identity:  palyrav1connect.NewIdentityServiceClient(hc, base, opts...),
		Policy:    palyrav1connect.NewPolicyServiceClient(hc, base, opts...),
		Secrets:   palyrav1connect.NewSecretServiceClient(hc, base, opts...),
		Snapshots: palyrav1connect.NewSnapshotServiceClient(hc, base, opts...),
		tr:        tr,
	}, nil
}

// Close releases the client's QUIC connection.
func (c *Client) Close() error { return c.tr.Close() }

// Error is a failure as the user should see it.
type Error struct {
	Code    string
	Message string
	Hint    string
}

func (e *Error) Error() string { return e.Message }

// Explain turns any error from a call into an *Error with a hint: the
// node's own {code, message, hint} when it sent one, else a diagnosis of
// the transport failure.
func (c *Client) Explain(err error) *Error {
	if err == nil {
		return nil
	}
	var out *Error
	if errors.As(err, &out) {
		return out
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if pe, ok := v.(*palyrav1.Error); ok {
					return &Error{Code: pe.Code, Message: pe.Message, Hint: pe.Hint}
				}
			}
		}
		if ce.Code() != connect.CodeUnavailable && ce.Code() != connect.CodeUnknown {
			return &Error{Code: strings.ReplaceAll(ce.Code().String(), " ", "_"), Message: ce.Message()}
		}
	}
	return c.transportError(err)
}

func (c *Client) transportError(err error) *Error {
	msg := err.Error()
	var idle *quic.IdleTimeoutError
	var hs *quic.HandshakeTimeoutError
	var tlsAlert tls.AlertError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &idle), errors.As(err, &hs), strings.Contains(msg, "timeout: no recent network activity"):
		return &Error{Code: "unreachable",
			Message: fmt.Sprintf("no palyra node answered at %s (QUIC over UDP)", c.Addr),
			Hint:    "start one with 'palyra node start', or point --addr / PALYRA_ADDR at a running node"}
	case strings.Contains(msg, "(remote): tls: bad certificate"), strings.Contains(msg, "(remote): tls: certificate required"):
		return &Error{Code: "unauthenticated",
			Message: fmt.Sprintf("the node at %s refused this credential: it was revoked, has expired, or belongs to another cluster", c.Addr),
			Hint:    "run 'palyra doctor' to see the certificate's state; if it was revoked, pair again with a new code"}
	case errors.As(err, &certErr), strings.Contains(msg, "certificate"), errors.As(err, &tlsAlert):
		return &Error{Code: "unauthenticated",
			Message: fmt.Sprintf("the node at %s and this credential do not trust each other: %v", c.Addr, err),
			Hint:    "use the credential of this node's cluster (--data-dir), or pair this device with 'palyra device pair'"}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: "deadline_exceeded", Message: fmt.Sprintf("request to %s timed out", c.Addr),
			Hint: "check the node's health with 'palyra status'"}
	}
	return &Error{Code: "unavailable", Message: fmt.Sprintf("call to %s failed: %v", c.Addr, err),
		Hint: "check that a node runs there ('palyra status') and that UDP to it is not blocked"}
}
