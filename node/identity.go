package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// peerCheck refuses revoked principals and certificates, and certificates
// the cluster's ledger does not hold, in every TLS handshake. Before raft
// is open nothing is known to be revoked.
func (n *Node) peerCheck(p identity.Principal, leaf *x509.Certificate) error {
	store := n.storeOrNil()
	if store == nil {
		return nil
	}
	if err := revokedCheck(store.State(), p, leaf); err != nil {
		return err
	}
	return n.ledgerCheck(store, p, leaf)
}

// revokedCheck refuses a revoked principal or certificate.
func revokedCheck(st *consensus.State, p identity.Principal, leaf *x509.Certificate) error {
	if st.IsRevoked(string(p.Kind), p.ID) {
		return fmt.Errorf("%s has been revoked", p)
	}
	if st.IsSerialRevoked(leaf.SerialNumber.String()) {
		return fmt.Errorf("certificate %s has been revoked", leaf.SerialNumber)
	}
	return nil
}

// ledgerJudgeWait bounds how long a TLS handshake waits for this node to
// confirm with the leader that its ledger is current (ledgerCheck).
const ledgerJudgeWait = 1500 * time.Millisecond

// ledgerCheck accepts leaf if the certificate ledger holds it for p, or
// a node's leaf on a key the ledger holds for that node (nodes renew on
// their key, so a replica that was down while a peer renewed knows the new
// certificate), or does not judge it (not started, or issued before a
// restart of the ledger to a member in good standing). Any other leaf may
// have been recorded moments ago and not applied here yet: the node makes
// its replica current through the leader (a read index, shared by the
// handshakes waiting at the same time) and looks again. A leaf still
// missing, or one this node cannot judge (it knows no leader, or none
// answers in time) and finds recorded in no entry of its own log past what
// it applied (a restarted node applies nothing past its snapshot until a
// leader speaks: Store.TailHasCert), is refused: a node without a leader
// lets nobody in on a certificate it cannot vouch for (it once did, and a
// forged node certificate could then win its vote and lead it).
func (n *Node) ledgerCheck(store *consensus.Store, p identity.Principal, leaf *x509.Certificate) error {
	verdict, why := store.State().CertStatus(leaf, string(p.Kind), p.ID)
	switch verdict {
	case consensus.CertRecorded, consensus.CertUnchecked:
		return nil
	case consensus.CertMismatch:
		return n.ledgerRefusal(p, leaf, why)
	}
	c := n.clusterRef.Load()
	if c != nil && !c.SeenSupport(cluster.FeatureCertLedger) {
		return nil // an older member signs without recording
	}
	if c == nil {
		return n.ledgerRefusal(p, leaf, why+" (this node is starting and cannot check it yet; retry)")
	}
	if _, leader := store.Leader(); leader == "" {
		if store.TailHasCert(leaf, string(p.Kind), p.ID) {
			return nil // recorded in an entry this node holds but has not applied (consensus/certtail.go)
		}
		return n.ledgerRefusal(p, leaf, why+" (as far as this node knows: it has no leader to check with; retry, or use another node)")
	}
	if err := n.judge.current(c, time.Now().Add(ledgerJudgeWait)); err != nil {
		if store.TailHasCert(leaf, string(p.Kind), p.ID) {
			return nil
		}
		return n.ledgerRefusal(p, leaf, why+" (as far as this node knows: it could not check with a leader: "+err.Error()+")")
	}
	if verdict, why = store.State().CertStatus(leaf, string(p.Kind), p.ID); verdict == consensus.CertRecorded || verdict == consensus.CertUnchecked {
		return nil
	}
	err := n.ledgerRefusal(p, leaf, why)
	if verdict == consensus.CertUnknown && p.Kind != identity.KindNode {
		// Judged on a current replica, so no retry helps. A QUIC
		// handshake refusal carries only its alert, so this one says
		// "unknown certificate" rather than "bad certificate": the CLI
		// can then tell its user the cluster does not know the
		// certificate (a device paired after the snapshot the cluster
		// was restored from). Nodes keep bad_certificate, which mesh
		// counts as a refusal.
		err = fmt.Errorf("%w (%w)", err, alertCertificateUnknown)
	}
	return err
}

// alertCertificateUnknown is the TLS alert certificate_unknown (RFC 8446
// §6.2), sent for a client certificate signed by this cluster's CA that
// its ledger, made current, does not hold.
const alertCertificateUnknown = tls.AlertError(46)

// ledgerRefusal logs a refused certificate (a few a minute: it may be an
// intrusion attempt with a copy of the CA key) and returns the refusal.
func (n *Node) ledgerRefusal(p identity.Principal, leaf *x509.Certificate, why string) error {
	n.ledgerWarn.Do(func() {
		n.log.Warn("refused a certificate the cluster's ledger does not hold: if nobody here just paired or renewed, someone may hold a copy of the CA key (rotate it: 'palyra ca rotate')",
			"peer", p.String(), "serial", leaf.SerialNumber.String(), "why", why)
	})
	return fmt.Errorf("%s: a certificate signed with the CA key outside the cluster is refused; pair again ('palyra pair create'), and if the CA key left a machine, rotate it ('palyra ca rotate')", why)
}

// ledgerJudge shares read indexes among the handshakes that need one: a
// handshake waits for a read index that began after it arrived (one begun
// earlier may predate the record it looks for), joining the one under way
// or starting the next.
type ledgerJudge struct {
	mu       sync.Mutex
	inflight *judgement
}

type judgement struct {
	began time.Time
	done  chan struct{}
	err   error
}

// current returns once a read index begun after the call has made this
// node's replica current, or with why it could not by deadline.
func (j *ledgerJudge) current(c *cluster.Cluster, deadline time.Time) error {
	arrived := time.Now()
	for {
		j.mu.Lock()
		g := j.inflight
		mine := g == nil
		if mine {
			g = &judgement{began: time.Now(), done: make(chan struct{})}
			j.inflight = g
		}
		j.mu.Unlock()
		if mine {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			g.err = c.VerifyRead(ctx)
			cancel()
			j.mu.Lock()
			j.inflight = nil
			j.mu.Unlock()
			close(g.done)
			return g.err
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-g.done:
			t.Stop()
		case <-t.C:
			return errors.New("timed out waiting for a read index")
		}
		if !g.began.Before(arrived) {
			return g.err
		}
		if !time.Now().Before(deadline) {
			return errors.New("timed out waiting for a read index")
		}
	}
}

func (n *Node) stateOrNil() *consensus.State {
	if s := n.storeOrNil(); s != nil {
		return s.State()
	}
	return nil
}

func (n *Node) storeOrNil() *consensus.Store {
	n.storeMu.RLock()
	defer n.storeMu.RUnlock()
	return n.store
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

// RecordCert commits leaf to the certificate ledger; the CA hands the
// certificate out only once that returns.
func (l tokenLedger) RecordCert(leaf *x509.Certificate) error {
	p, err := identity.PrincipalFromCert(leaf)
	if err != nil {
		return fmt.Errorf("record certificate: %w", err)
	}
	// Before the ledger starts, nothing is recorded while an older member
	// could not apply the record; once it has, everything is (a
	// certificate left out would be refused once that member is gone).
	if _, _, started := l.n.store.State().CertLedgerStarted(); !started && !l.n.cluster.SeenSupport(cluster.FeatureCertLedger) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = l.n.apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RecordCerts{RecordCerts: &raftpb.RecordCerts{
		Certs: []*raftpb.IssuedCert{consensus.IssuedCertPB(leaf, string(p.Kind), p.ID)}, AtMs: time.Now().UnixMilli(),
		By: "node:" + l.n.state.NodeID}}})
	if err != nil {
		return fmt.Errorf("record certificate %s in the cluster's ledger: %w", leaf.SerialNumber, err)
	}
	return nil
}

func (l tokenLedger) RevokeSerial(serial, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.n.apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RevokeCert{RevokeCert: &raftpb.RevokeCert{Serial: serial, AtMs: time.Now().UnixMilli(), Reason: reason}}})
	return err
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
	if _, ok := st.Member("node", n.state.NodeID); !ok {
		if err := n.startCertLedger(ctx); err != nil {
			return err
		}
	}
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

// startCertLedger starts a new cluster's certificate ledger complete: it
// records the two certificates signed before raft was open (this node's
// and its local operator's), then says every certificate the cluster
// accepts from here on is in the ledger. A cluster whose ledger is
// started already (a restore, a restart after a failed first start) is
// left as it is.
func (n *Node) startCertLedger(ctx context.Context) error {
	if _, _, started := n.store.State().CertLedgerStarted(); started {
		return nil
	}
	certs := []*raftpb.IssuedCert{consensus.IssuedCertPB(n.cred.Current().Leaf, "node", n.state.NodeID)}
	if n.state.OperatorID != "" {
		op, err := identity.LoadCredential(n.layout.OperatorDir())
		if err != nil {
			return fmt.Errorf("read the local operator's certificate: %w", err)
		}
		certs = append(certs, consensus.IssuedCertPB(op.Leaf, "device", n.state.OperatorID))
	}
	now := time.Now().UnixMilli()
	if _, err := n.apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RecordCerts{RecordCerts: &raftpb.RecordCerts{Certs: certs, AtMs: now}}}); err != nil {
		return fmt.Errorf("record the first certificates: %w", err)
	}
	_, err := n.apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_StartCertLedger{StartCertLedger: &raftpb.StartCertLedger{AtMs: now, Complete: true, Reason: "new cluster"}}})
	if err != nil && !errors.Is(err, consensus.ErrConflict) {
		return fmt.Errorf("start the certificate ledger: %w", err)
	}
	return nil
}

// renewLoop renews this node's certificate (and, on the node that made the
// cluster, the local operator's) two thirds into its lifetime, and at once
// when a CA rotation activates a new root; it swaps the node's into the
// live TLS configs and saves both to disk. Failures retry with backoff.
func (n *Node) renewLoop(ctx context.Context) {
	for {
		timer := time.NewTimer(max(time.Until(n.nextRenewal()), 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-n.keeper.renewNow:
			timer.Stop()
		}
		backoff := time.Second
		for {
			err := n.renewDue(ctx)
			if err == nil {
				break
			}
			n.log.Warn("certificate renewal failed; retrying", "err", err, "in", backoff, "expires", n.cred.Current().Leaf.NotAfter)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, time.Minute)
		}
	}
}

// nextRenewal is when the next of this node's credentials is due.
func (n *Node) nextRenewal() time.Time {
	b := n.keeper.trust()
	cur := n.cred.Current()
	if n.keeper.due(cur, b) {
		return time.Now()
	}
	at := identity.RenewAt(cur.Leaf)
	if op, err := identity.LoadCredential(n.layout.OperatorDir()); err == nil {
		if n.keeper.due(op, b) {
			return time.Now()
		}
		if t := identity.RenewAt(op.Leaf); t.Before(at) {
			at = t
		}
	}
	return at
}

// renewDue renews each of this node's credentials that is due.
func (n *Node) renewDue(ctx context.Context) error {
	b := n.keeper.trust()
	if cur := n.cred.Current(); n.keeper.due(cur, b) {
		fresh, err := n.reissue(ctx, cur)
		if err != nil {
			return fmt.Errorf("renew node certificate: %w", err)
		}
		n.credMu.Lock()
		err = identity.SaveCredential(n.layout.NodeCredDir(), fresh)
		if err == nil {
			err = n.cred.Swap(fresh)
		}
		n.credMu.Unlock()
		if err != nil {
			return err
		}
		n.log.Info("certificate renewed", "expires", fresh.Leaf.NotAfter.UTC().Format(time.RFC3339),
			"root", prefix(identity.Fingerprint(identity.IssuingRoot(fresh.Leaf, fresh.RootCerts).Raw)))
	}
	op, err := identity.LoadCredential(n.layout.OperatorDir())
	if err != nil || !n.keeper.due(op, b) {
		return nil
	}
	fresh, err := n.reissue(ctx, op)
	if err != nil {
		return fmt.Errorf("renew the local operator credential: %w", err)
	}
	n.credMu.Lock()
	defer n.credMu.Unlock()
	return identity.SaveCredential(n.layout.OperatorDir(), fresh)
}

// reissue makes a fresh key for cur's principal and has it certified: by
// this node's CA key when it holds the active one, else by a node that does
// (asked as this node, with cur and its renewal proof).
func (n *Node) reissue(ctx context.Context, cur *identity.Credential) (*identity.Credential, error) {
	// A node keeps its key: a peer that was down while it renewed knows the
	// new certificate by that key (consensus.CertStatus), and can catch up
	// from it. A device (the local operator) gets a fresh one.
	key, csr, err := identity.NewKeyAndCSR(cur.Principal)
	if cur.Principal.Kind == identity.KindNode {
		key = cur.Key
		csr, err = identity.CSRFor(cur.Key, cur.Principal)
	}
	if err != nil {
		return nil, err
	}
	var chain []*x509.Certificate
	roots := n.keeper.Roots()
	if n.keeper.CanSign() {
		if chain, err = n.keeper.Sign(ctx, csr, cur.Principal, n.cfg.CertTTL); err != nil {
			return nil, err
		}
	} else {
		proof, err := identity.RenewalProof(cur.Key, csr)
		if err != nil {
			return nil, err
		}
		// cur goes with the request, this node's own too: the signer
		// judges the certificate being renewed, and the connection's may
		// be an older one of this node's (connections outlive renewals).
		req := &palyrav1.RenewRequest{CsrDer: csr, Proof: proof}
		for _, c := range append([]*x509.Certificate{cur.Leaf}, cur.Chain...) {
			req.RelayChainDer = append(req.RelayChainDer, c.Raw)
		}
		var resp *palyrav1.RenewResponse
		err = n.viaSigners(ctx, func(ctx context.Context, ic palyrav1connect.IdentityServiceClient) error {
			r, err := ic.Renew(ctx, connect.NewRequest(req))
			if err == nil {
				resp = r.Msg
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(resp.ChainDer) == 0 {
			return nil, errors.New("the signing node returned no certificate")
		}
		for _, der := range resp.ChainDer {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, fmt.Errorf("renewed certificate: %w", err)
			}
			chain = append(chain, c)
		}
		if identity.IssuingRoot(chain[0], roots) == nil {
			// The signer is ahead of this replica: take the bundle it sent.
			roots = nil
			for _, der := range resp.RootsDer {
				if c, err := x509.ParseCertificate(der); err == nil {
					roots = append(roots, c)
				}
			}
		}
	}
	return &identity.Credential{Principal: cur.Principal, Leaf: chain[0], Chain: chain[1:], Key: key, RootCerts: roots, Roots: pool(roots)}, nil
}
