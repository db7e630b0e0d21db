package node

import (
	"connectrpc.com/connect"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"os"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// peerCheck refuses revoked principals and certificates in every TLS
// handshake. Before raft is open nothing is known to be revoked.
func (n *Node) peerCheck(p identity.Principal, leaf *x509.Certificate) error {
	st := n.stateOrNil()
	if st == nil {
		return nil
	}
	if st.IsRevoked(string(p.Kind), p.ID) {
		return fmt.Errorf("%s has been revoked", p)
	}
	if st.IsSerialRevoked(leaf.SerialNumber.String()) {
		return fmt.Errorf("certificate %s has been revoked", leaf.SerialNumber)
	}
	return nil
}

func (n *Node) stateOrNil() *consensus.State {
	n.storeMu.RLock()
	defer n.storeMu.RUnlock()
	if n.store == nil {
		return nil
	}
	return n.store.State()
}

// tokenLedger keeps the CA's one-time tokens and revocations in Raft.
type tokenLedger struct{ n *Node }

func (l tokenLedger) UseToken(id string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.n.apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_UseToken{UseToken: &raftpb.UseToken{Id: id, AtMs: time.Now().UnixMilli()}}})
	if errors.Is(err, consensus.ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

func (l tokenLedger) IsSerialRevoked(serial string) bool {
	st := l.n.stateOrNil()
	return st != nil && st.IsSerialRevoked(serial)
}

func (l tokenLedger) RevokeSerial(serial, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.n.apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RevokeCert{RevokeCert: &raftpb.RevokeCert{Serial: serial, AtMs: time.Now().UnixMilli(), Reason: reason}}})
	return err
}

// loadCA opens the cluster CA if this node holds it.
func (n *Node) loadCA() (*identity.CA, error) {
	if _, err := os.Stat(n.layout.CADir()); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	ca, err := identity.LoadCA(n.layout.CADir(), identity.WithTokenLedger(tokenLedger{n}), identity.WithLogger(n.log))
	if err != nil {
		return nil, fmt.Errorf("load cluster CA: %w", err)
	}
	return ca, nil
}

// registerInitMembers records the init node and its operator device in the
// replicated registry (idempotent), so policy sees the operator flag.
func (n *Node) registerInitMembers(ctx context.Context) error {
	st := n.store.State()
	add := func(m consensus.Member) error {
		if _, ok := st.Member(m.Kind, m.ID); ok {
			return nil
		}
		_, err := n.apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: consensus.MemberPB(&m)}}})
		return err
	}
	now := time.Now().UnixMilli()
	if err := add(consensus.Member{Kind: "node", ID: n.state.NodeID, AddedAtMS: now, AddedBy: "init", Labels: n.cfg.Labels}); err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	if n.state.OperatorID != "" {
		if err := add(consensus.Member{Kind: "device", ID: n.state.OperatorID, Name: "local operator", Operator: true, AddedAtMS: now, AddedBy: "init"}); err != nil {
			return fmt.Errorf("register local operator: %w", err)
		}
	}
	return nil
}

// renewLoop renews this node's certificate (and, on the CA node, the local
// operator credential) two thirds into its lifetime, swapping it into the
// live TLS configs and saving it to disk. Failures retry with backoff.
func (n *Node) renewLoop(ctx context.Context) {
	for {
		leaf := n.cred.Current().Leaf
		wait := time.Until(identity.RenewAt(leaf))
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, 0)):
		}
		backoff := time.Second
		for {
			err := n.renew(ctx)
			if err == nil {
				break
			}
			n.log.Warn("certificate renewal failed; retrying", "err", err, "in", backoff, "expires", leaf.NotAfter)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, time.Minute)
		}
	}
}

func (n *Node) renew(ctx context.Context) error {
	cur := n.cred.Current()
	var fresh *identity.Credential
	var err error
	if n.ca != nil {
		fresh, err = n.issueFor(ctx, cur.Principal, cur.RootCerts)
	} else {
		fresh, err = n.renewRemote(ctx, cur)
	}
	if err != nil {
		return err
	}
	if err := identity.SaveCredential(n.layout.NodeCredDir(), fresh); err != nil {
		return err
	}
	if err := n.cred.Swap(fresh); err != nil {
		return err
	}
	n.log.Info("certificate renewed", "expires", fresh.Leaf.NotAfter.UTC().Format(time.RFC3339))
	if op, err := identity.LoadCredential(n.layout.OperatorDir()); err == nil && time.Now().After(identity.RenewAt(op.Leaf)) {
		if nop, err := n.issueFor(ctx, op.Principal, op.RootCerts); err == nil {
			_ = identity.SaveCredential(n.layout.OperatorDir(), nop)
		}
	}
	return nil
}

// issueFor makes a fresh key and certificate for p with the local CA.
func (n *Node) issueFor(ctx context.Context, p identity.Principal, roots []*x509.Certificate) (*identity.Credential, error) {
	key, csr, err := identity.NewKeyAndCSR(p)
	if err != nil {
		return nil, err
	}
	chain, err := n.ca.Sign(ctx, csr, p, n.cfg.CertTTL)
	if err != nil {
		return nil, err
	}
	return &identity.Credential{Principal: p, Leaf: chain[0], Chain: chain[1:], Key: key, RootCerts: roots}, nil
}

// renewRemote has the CA node sign a fresh key's CSR for this node.
func (n *Node) renewRemote(ctx context.Context, cur *identity.Credential) (*identity.Credential, error) {
	ic, err := n.forwardAPI(ctx)
	if err != nil {
		return nil, err
	}
	key, csr, err := identity.NewKeyAndCSR(cur.Principal)
	if err != nil {
		return nil, err
	}
	resp, err := ic.Renew(ctx, connect.NewRequest(&palyrav1.RenewRequest{CsrDer: csr}))
	if err != nil {
		return nil, err
	}
	if len(resp.Msg.ChainDer) == 0 {
		return nil, errors.New("CA node returned no certificate")
	}
	var chain []*x509.Certificate
	for _, der := range resp.Msg.ChainDer {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("renewed certificate: %w", err)
		}
		chain = append(chain, c)
	}
	return &identity.Credential{Principal: cur.Principal, Leaf: chain[0], Chain: chain[1:], Key: key, RootCerts: cur.RootCerts}, nil
}
