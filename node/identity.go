package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/api"
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

// ledgerCheck accepts leaf if the certificate ledger holds it for p (or
// does not judge it: not started, or issued before a restart of the
// ledger to a member in good standing). A leaf it lacks may have been
// recorded moments ago and not applied here yet: the node makes its
// replica current through the leader (a read index, shared by the
// handshakes waiting at the same time) and looks again, and refuses the
// leaf if it is still missing. A node that cannot do that within
// ledgerJudgeWait (no leader, cut off, or the question needs the very
// connection being checked) accepts the leaf with a warning and checks
// that connection again once it can (recheckLedger): refusing its peers'
// new certificates would keep a node that is behind from ever catching
// up.
func (n *Node) ledgerCheck(store *consensus.Store, p identity.Principal, leaf *x509.Certificate) error {
	verdict, why := store.State().CertStatus(leaf, string(p.Kind), p.ID)
	switch verdict {
	case consensus.CertRecorded, consensus.CertUnchecked:
		return nil
	case consensus.CertMismatch:
		return ledgerRefusal(why)
	}
	c := n.clusterRef.Load()
	if c != nil && !c.SeenSupport(cluster.FeatureCertLedger) {
		return nil // an older member signs without recording
	}
	if c == nil {
		n.acceptUnjudged(p, leaf, "this node is starting")
		return nil
	}
	if _, leader := store.Leader(); leader == "" {
		// No read index can be had: do not hold the handshake for one (it
		// may be the new leader's, the very contact that would end this).
		n.acceptUnjudged(p, leaf, "this node knows no leader")
		return nil
	}
	if err := n.judge.current(c, time.Now().Add(ledgerJudgeWait)); err != nil {
		n.acceptUnjudged(p, leaf, "this node could not bring its ledger up to date through a leader: "+err.Error())
		return nil
	}
	if verdict, why = store.State().CertStatus(leaf, string(p.Kind), p.ID); verdict == consensus.CertRecorded || verdict == consensus.CertUnchecked {
		return nil
	}
	return ledgerRefusal(why)
}

func ledgerRefusal(why string) error {
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

// acceptUnjudged lets a connection through whose certificate the ledger
// lacks while this node cannot tell whether it was issued since, and has
// recheckLedger look at it again.
func (n *Node) acceptUnjudged(p identity.Principal, leaf *x509.Certificate, why string) {
	n.unjudgedMu.Lock()
	if n.unjudged == nil {
		n.unjudged = map[string]bool{}
	}
	n.unjudged[leaf.SerialNumber.String()] = true
	n.unjudgedMu.Unlock()
	n.ledgerWarn.Do(func() {
		n.log.Warn("accepted a certificate this node's ledger lacks, for now: "+why+"; the connection is checked again once this node is current",
			"peer", p.String(), "serial", leaf.SerialNumber.String())
	})
}

// certGate holds back the API requests on a connection let through
// before its certificate could be judged (acceptUnjudged) until it can
// be: refused if the ledger lacks it, served once it holds it (the
// serial is then judged for good), 503 while this node still cannot
// tell. Other connections pass at the cost of a map lookup.
func (n *Node) certGate(ctx context.Context, p identity.Principal, leaf *x509.Certificate) error {
	serial := leaf.SerialNumber.String()
	n.unjudgedMu.Lock()
	pending := n.unjudged[serial]
	n.unjudgedMu.Unlock()
	if !pending {
		return nil
	}
	c := n.clusterRef.Load()
	if c == nil {
		return api.ErrCertUnjudged
	}
	if !c.SeenSupport(cluster.FeatureCertLedger) {
		return nil // as ledgerCheck: an older member signs without recording
	}
	if _, leader := n.store.Leader(); leader == "" {
		return api.ErrCertUnjudged
	}
	if err := n.judge.current(c, time.Now().Add(ledgerJudgeWait)); err != nil {
		return api.ErrCertUnjudged
	}
	v, why := n.store.State().CertStatus(leaf, string(p.Kind), p.ID)
	if v == consensus.CertUnknown || v == consensus.CertMismatch {
		return ledgerRefusal(why)
	}
	n.unjudgedMu.Lock()
	delete(n.unjudged, serial)
	n.unjudgedMu.Unlock()
	return nil
}

// recheckEvery is how often recheckLedger looks for connections accepted
// unjudged.
const recheckEvery = 2 * time.Second

// recheckLedger closes the connections accepted unjudged (acceptUnjudged)
// whose certificates the ledger still lacks once this node is current;
// other connections are left alone.
func (n *Node) recheckLedger(ctx context.Context) {
	t := time.NewTicker(recheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The serials stay pending (certGate holds their API requests)
		// until they are judged here.
		n.unjudgedMu.Lock()
		pending := maps.Clone(n.unjudged)
		n.unjudgedMu.Unlock()
		if len(pending) == 0 {
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := n.cluster.VerifyRead(vctx)
		cancel()
		if err != nil || !n.cluster.SeenSupport(cluster.FeatureCertLedger) {
			continue
		}
		st := n.store.State()
		dropped := n.transport.DropPeers(func(cs tls.ConnectionState) bool {
			if len(cs.PeerCertificates) == 0 || !pending[cs.PeerCertificates[0].SerialNumber.String()] {
				return false
			}
			p, err := identity.PrincipalFromCert(cs.PeerCertificates[0])
			if err != nil {
				return false
			}
			v, _ := st.CertStatus(cs.PeerCertificates[0], string(p.Kind), p.ID)
			return v == consensus.CertUnknown || v == consensus.CertMismatch
		})
		n.unjudgedMu.Lock()
		for s := range pending {
			delete(n.unjudged, s)
		}
		n.unjudgedMu.Unlock()
		if dropped > 0 {
			n.log.Warn("closed connections whose certificates the cluster never issued (accepted while this node could not tell)", "connections", dropped)
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
	key, csr, err := identity.NewKeyAndCSR(cur.Principal)
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
