package node

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/api"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
)

var errNoSigner = errors.New("no live node holds the key of the cluster's active CA root; voters fetch it from each other within seconds of a change, so retry shortly (if the cluster lost every voter, it has lost its quorum too)")

// caClient is this node's API client to signing nodes, authenticated as
// this node, dialled over the node's own QUIC socket.
type caClient struct {
	once sync.Once
	tr   *http3.Transport
	hc   *http.Client
}

// signerAddrs lists live nodes that say in gossip they hold the active
// root's key, the leader first.
func (n *Node) signerAddrs() []string {
	fp := prefix(n.keeper.Fingerprint())
	var out []string
	for _, m := range n.cluster.Members() {
		if m.ID == n.state.NodeID || m.State != cluster.StateAlive || !slices.Contains(strings.Split(m.Labels[api.LabelCAKeys], ","), fp) {
			continue
		}
		if m.Leader {
			out = append([]string{m.Address}, out...)
		} else {
			out = append(out, m.Address)
		}
	}
	return out
}

// signerAttempt bounds one call to one signing node: signing takes
// milliseconds, so a signer that has not answered by then (its connection
// alive but the call stalled) gives way to the next.
const signerAttempt = 15 * time.Second

// viaSigners calls fn with an identity client of each signing node in
// turn, until one call succeeds or fails for a reason another signer would
// repeat. Each call gets at most signerAttempt of ctx.
func (n *Node) viaSigners(ctx context.Context, fn func(context.Context, palyrav1connect.IdentityServiceClient) error) error {
	addrs := n.signerAddrs()
	if len(addrs) == 0 {
		return errNoSigner
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
	var err error
	for _, addr := range addrs {
		actx, cancel := context.WithTimeout(ctx, signerAttempt)
		err = fn(actx, palyrav1connect.NewIdentityServiceClient(n.caCl.hc, "https://"+addr))
		cancel()
		if err != nil && ctx.Err() != nil {
			return err // the caller gave up: no other signer can help
		}
		var ce *connect.Error
		if err == nil || (errors.As(err, &ce) && ce.Code() != connect.CodeUnavailable && ce.Code() != connect.CodeUnknown && ce.Code() != connect.CodeDeadlineExceeded) {
			return err
		}
		n.log.Debug("signing node did not answer; trying the next", "addr", addr, "err", err)
	}
	return err
}
