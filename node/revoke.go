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
	selfDone := make(chan struct{})
	go func() { defer close(selfDone); n.watchSelfRefused(ctx, refusedCheckEvery) }()
	defer func() { <-selfDone }()
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
				return err == nil && revokedCheck(st, p, cs.PeerCertificates[0]) != nil
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

// How often a node looks whether the cluster refuses its certificate, and
// how often at most it says so.
const (
	refusedCheckEvery = 2 * time.Second
	refusedLogEvery   = 5 * time.Minute
)

// refusedMessage is what a node removed from the cluster is told.
const refusedMessage = "this node's certificate is refused by the cluster: it was removed ('palyra node remove', or 'node recover' on a survivor after a lost quorum); " + RemovedFix

// WhyStaleTrust is the refusal's reason (refused.json's "because") when
// this node refused every peer's certificate, for 'palyra doctor'.
const WhyStaleTrust = "it refused the certificate of every peer it tried"

// staleTrustMessage is what a node that trusts none of its peers is told.
const staleTrustMessage = "this node trusts none of its peers' certificates: the cluster replaced its CA root while this node was down and has since dropped the old one ('palyra ca rotate'), " +
	"or every peer it can reach joined while it was down (its certificate ledger does not hold them and it knows no leader to check with), or the peers it knows are another cluster's; " + RemovedFix

// RemovedFix is what brings a removed node's machine back: its data dir
// holds an identity the cluster refuses for good.
const RemovedFix = "to bring this machine back, stop it, move its data dir away and join again with a new code " +
	"('palyra node join --code CODE --peer HOST:PORT')"

// selfRefused says whether the cluster refuses this node's certificate:
// its own replica's registry names it revoked, or every peer it tried
// refused its certificate in the TLS handshake. A node that merely cannot
// reach its peers is not refused.
// It also says so when this node refuses every peer's certificate (its
// trust is out of date: a CA rotation it slept through), with that
// message: raft's own lines blamed the peers, many times a second.
func (n *Node) selfRefused() (refused bool, why, message string) {
	if st := n.store.State(); st.IsRevoked("node", n.state.NodeID) {
		return true, "this node's registry entry is revoked", refusedMessage
	}
	if refusing, ended := n.transport.CertRefusals(); ended > 0 && refusing == ended {
		return true, "every peer it tried refused its certificate", refusedMessage
	}
	if refused, ended := n.transport.PeerCertRefusals(); ended > 0 && refused == ended {
		return true, WhyStaleTrust, staleTrustMessage
	}
	return false, "", ""
}

// watchSelfRefused logs refusedMessage once, and again at most every
// refusedLogEvery while it holds, so a removed node restarted on its old
// data dir says what happened instead of only raft's dial errors. It
// keeps refused.json in the data dir in step, for 'palyra doctor'.
func (n *Node) watchSelfRefused(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last time.Time
	written, recorded := false, false // whether refused.json was brought in step, and to what
	for {
		refused, why, msg := n.selfRefused()
		n.refused.Store(refused) // raft's own lines go quiet meanwhile
		if refused && (last.IsZero() || time.Since(last) >= refusedLogEvery) {
			last = time.Now()
			n.log.Error(msg, "because", why)
		}
		if !written || recorded != refused {
			if err := n.layout.recordRefusal(refused, why, time.Now()); err != nil {
				n.log.Warn("cannot record the cluster's refusal of this node for 'palyra doctor'", "file", n.layout.RefusedFile(), "err", err)
			} else {
				written, recorded = true, refused
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
