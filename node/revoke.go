package node

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
)

// watchRevocations cuts live connections of principals revoked since the
// last look (new connections are refused in the handshake by peerCheck),
// and, on the leader, removes a revoked node from Raft at once rather than
// waiting for it to be declared dead. "Within seconds" holds because the
// revocation reaches every node with the log.
func (n *Node) watchRevocations(ctx context.Context) {
	st := n.store.State()
	seen := map[string]bool{}
	for {
		changed := st.Watch(consensus.TopicMembers)
		var fresh []string
		for _, m := range st.Members("") {
			if m.Revoked && !seen[m.Principal()] {
				seen[m.Principal()] = true
				fresh = append(fresh, m.Principal())
			}
		}
		if len(fresh) > 0 {
			dropped := n.transport.DropPeers(func(cs tls.ConnectionState) bool {
				if len(cs.PeerCertificates) == 0 {
					return false
				}
				p, err := identity.PrincipalFromCert(cs.PeerCertificates[0])
				return err == nil && n.peerCheck(p, cs.PeerCertificates[0]) != nil
			})
			n.log.Info("revocation: cut live connections", "revoked", fresh, "connections", dropped)
			if n.store.IsLeader() {
				for _, pr := range fresh {
					if len(pr) > 5 && pr[:5] == "node:" {
						id := pr[5:]
						if f := n.store.Raft().RemoveServer(raft.ServerID(id), 0, 10*time.Second); f.Error() == nil {
							n.log.Info("removed revoked node from raft", "peer", id)
						}
					}
				}
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}
