package node

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"sync"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

var errNoCANode = errors.New("no live node holds the cluster CA; start the cluster's first node")

// caClient is this node's API client to the CA node, authenticated as this
// node, dialled over the node's own QUIC socket.
type caClient struct {
	once sync.Once
	tr   *http3.Transport
	hc   *http.Client
}

func (n *Node) caAddr() (string, error) {
	for _, m := range n.cluster.Members() {
		if m.State == cluster.StateAlive && m.Labels[caLabel] == "true" {
			return m.Address, nil
		}
	}
	return "", errNoCANode
}

// forwardAPI returns an identity client connected to the CA node.
func (n *Node) forwardAPI(ctx context.Context) (palyrav1connect.IdentityServiceClient, error) {
	addr, err := n.caAddr()
	if err != nil {
		return nil, err
	}
	n.caCl.once.Do(func() {
		n.caCl.tr = &http3.Transport{
			TLSClientConfig: identity.LiveClientTLSConfig(n.cred, []string{http3.NextProtoH3}, n.peerCheck),
			Dial: func(ctx context.Context, addr string, _ *tls.Config, _ *quic.Config) (*quic.Conn, error) {
				return n.transport.DialAPI(ctx, addr)
			},
		}
		n.caCl.hc = &http.Client{Transport: n.caCl.tr}
	})
	return palyrav1connect.NewIdentityServiceClient(n.caCl.hc, "https://"+addr), nil
}
