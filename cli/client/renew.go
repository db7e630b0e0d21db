package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// Renew has the node at c's address certify a fresh key for cred's
// principal and returns the new credential, trusting the cluster's trust
// bundle as the node sends it. The key is made here and never leaves this
// machine. The request carries cred's renewal proof, so a node that holds
// no CA key can relay it to one that does.
func (c *Client) Renew(ctx context.Context, cred *identity.Credential) (*identity.Credential, error) {
	key, csr, err := identity.NewKeyAndCSR(cred.Principal)
	if err != nil {
		return nil, err
	}
	proof, err := identity.RenewalProof(cred.Key, csr)
	if err != nil {
		return nil, err
	}
	resp, err := c.Identity.Renew(ctx, connect.NewRequest(&palyrav1.RenewRequest{CsrDer: csr, Proof: proof}))
	if err != nil {
		return nil, c.Explain(err)
	}
	if len(resp.Msg.ChainDer) == 0 {
		return nil, errors.New("renewal: the node returned no certificate")
	}
	chain := make([]*x509.Certificate, len(resp.Msg.ChainDer))
	for i, der := range resp.Msg.ChainDer {
		if chain[i], err = x509.ParseCertificate(der); err != nil {
			return nil, fmt.Errorf("renewal: certificate %d: %w", i+1, err)
		}
	}
	roots := cred.RootCerts
	if len(resp.Msg.RootsDer) > 0 {
		roots = nil
		for _, der := range resp.Msg.RootsDer {
			r, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, fmt.Errorf("renewal: root certificate: %w", err)
			}
			roots = append(roots, r)
		}
	}
	if identity.IssuingRoot(chain[0], roots) == nil {
		return nil, errors.New("renewal: the new certificate was not issued by a root of the cluster's trust bundle")
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	return &identity.Credential{Principal: cred.Principal, Leaf: chain[0], Chain: chain[1:], Key: key, Roots: pool, RootCerts: roots}, nil
}

// ObserveServer records the certificates the node presents in each
// handshake of this client (its leaf first, then its chain and trusted
// roots) and returns a function reading the latest. Call it before the
// first call. The CLI uses it to notice that the cluster moved to a CA
// root this credential does not come from.
func (c *Client) ObserveServer() func() []*x509.Certificate {
	var mu sync.Mutex
	var last []*x509.Certificate
	cfg := c.tr.TLSClientConfig
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		mu.Lock()
		last = cs.PeerCertificates
		mu.Unlock()
		return nil
	}
	return func() []*x509.Certificate {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}
