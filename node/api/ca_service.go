package api

import (
	"context"
	"crypto/x509"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// Gossip labels through which nodes say what they hold of the CA; node
// sets them, the API reports them.
const (
	// LabelCAKeys lists the fingerprint prefixes of the CA keys a node holds.
	LabelCAKeys = "palyra.ca"
	// LabelCertRoot is the fingerprint prefix of the root that issued a
	// node's current certificate.
	LabelCertRoot = "palyra.cert"
	// LabelCertTimes is "EXPIRES,RENEWAT" of a node's current certificate,
	// unix seconds (identity.RenewAt): ca status shows them and warns of a
	// node past its renewal time.
	LabelCertTimes = "palyra.certexp"
	// FingerprintPrefix is how many hex digits of a fingerprint the labels carry.
	FingerprintPrefix = 12
)

// Bounds of a rotation's overlap, the time the old root stays trusted.
const (
	minOverlap = 5 * time.Second
	maxOverlap = 90 * 24 * time.Hour
	// rotateWait bounds how long RotateCA waits for the new root to become
	// active before it answers that the rotation goes on in the background.
	rotateWait = 2 * time.Minute
)

// caFingerprint is the active root's fingerprint.
func (s *Server) caFingerprint() string {
	if s.Issuer != nil {
		if fp := s.Issuer.Fingerprint(); fp != "" {
			return fp
		}
	}
	return s.info.CAFingerprint
}

func prefix(fp string) string {
	if len(fp) > FingerprintPrefix {
		return fp[:FingerprintPrefix]
	}
	return fp
}

func rootsToPB(b consensus.TrustBundle, holders map[string][]string) []*palyrav1.CARoot {
	var out []*palyrav1.CARoot
	for _, r := range b.Roots {
		pb := &palyrav1.CARoot{Fingerprint: r.Fingerprint, State: r.State.String(), AddedAtMs: r.AddedAtMS,
			ActivatedAtMs: r.ActivatedAtMS, RetireAtMs: r.RetireAtMS, Holders: holders[prefix(r.Fingerprint)]}
		if c, err := x509.ParseCertificate(r.DER); err == nil {
			pb.Subject, pb.NotAfterMs = c.Subject.CommonName, c.NotAfter.UnixMilli()
		}
		out = append(out, pb)
	}
	return out
}

// caView lists the roots and, from gossip, which node holds which key.
func (s *Server) caView() ([]*palyrav1.CARoot, []*palyrav1.CANode) {
	nodes, holders := s.caNodes()
	return rootsToPB(s.control.State().Trust(), holders), nodes
}

// caNodes lists the members with the keys they gossip, and the holders of
// each key by fingerprint prefix. A removed (revoked) node is listed with
// what it last said it held, but holds nothing that can sign.
func (s *Server) caNodes() ([]*palyrav1.CANode, map[string][]string) {
	holders := map[string][]string{}
	var nodes []*palyrav1.CANode
	if s.Members != nil {
		for _, m := range s.Members() {
			n := &palyrav1.CANode{Id: m.ID, Voter: m.Voter, State: MemberState(s.control.State(), m), CertRoot: m.Labels[LabelCertRoot]}
			n.CertExpiresMs, n.CertRenewAtMs = ParseCertTimes(m.Labels[LabelCertTimes])
			revoked := s.control.State().IsRevoked("node", m.ID)
			if v := m.Labels[LabelCAKeys]; v != "" {
				n.Holds = strings.Split(v, ",")
				for _, fp := range n.Holds {
					if revoked {
						// A removed node's copy is no holder that can sign;
						// ca status tells to wipe that machine.
						continue
					}
					holders[fp] = append(holders[fp], m.ID)
				}
			}
			nodes = append(nodes, n)
		}
	}
	return nodes, holders
}

func (is identityService) GetCA(ctx context.Context, _ *connect.Request[palyrav1.GetCARequest]) (*connect.Response[palyrav1.GetCAResponse], error) {
	s := is.s
	if err := s.authz.Check(ctx, policy.ActionCAStatus, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	roots, nodes := s.caView()
	st := s.control.State()
	since, complete, started := st.CertLedgerStarted()
	ledger := &palyrav1.CertLedgerStatus{Started: started, Complete: complete, SinceMs: since, Certificates: uint32(st.IssuedCerts())}
	if started && !complete {
		ledger.UnrecordedUntilMs = since + consensus.MaxCertLifetimeMS
	}
	return connect.NewResponse(&palyrav1.GetCAResponse{Roots: roots, Nodes: nodes, Rotating: st.Trust().Rotation != nil, Ledger: ledger}), nil
}

// RotateCA asks the cluster for a new CA root. The request is committed
// through Raft; the leader then makes the root (cross-signed by the active
// one), waits until every live voter holds its key, and activates it. From
// then on every certificate is issued under the new root, nodes renew at
// once and devices on their next call, and the old root stays trusted for
// the overlap. RotateCA waits (up to two minutes) for the activation.
func (is identityService) RotateCA(ctx context.Context, req *connect.Request[palyrav1.RotateCARequest]) (*connect.Response[palyrav1.RotateCAResponse], error) {
	s := is.s
	if err := s.authz.Check(ctx, policy.ActionCARotate, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	overlap := time.Duration(req.Msg.OverlapMs) * time.Millisecond
	if overlap == 0 {
		overlap = s.CertTTL
	}
	if overlap < minOverlap || overlap > maxOverlap {
		return nil, invalid(fmt.Sprintf("overlap %s is out of range", overlap),
			fmt.Sprintf("use --overlap between %s and %s; at least the certificate lifetime lets every device renew in time", minOverlap, maxOverlap))
	}
	st := s.control.State()
	old, ok := st.Trust().Active()
	if !ok {
		return nil, apiError(connect.CodeFailedPrecondition, "not_ready", "the cluster has not recorded its CA root yet", "wait until the cluster has finished starting and try again")
	}
	caller, _ := PrincipalFrom(ctx)
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_CaTrust{CaTrust: &raftpb.CATrust{
		AtMs: s.now().UnixMilli(), By: caller.String(),
		Op: &raftpb.CATrust_Request{Request: &raftpb.CARequestRotation{OverlapMs: overlap.Milliseconds()}}}}}); err != nil {
		return nil, fromErr(err)
	}
	s.log.Info("CA rotation requested", "by", caller, "old_root", prefix(old.Fingerprint), "overlap", overlap)
	wctx, cancel := context.WithTimeout(ctx, rotateWait)
	defer cancel()
	resp := &palyrav1.RotateCAResponse{OldFingerprint: old.Fingerprint}
	for waiting := true; waiting; {
		changed := st.Watch(consensus.TopicTrust)
		b := st.Trust()
		if a, ok := b.Active(); ok && a.Fingerprint != old.Fingerprint {
			resp.NewFingerprint, resp.Activated = a.Fingerprint, true
			if r, ok := b.Root(old.Fingerprint); ok {
				resp.RetireAtMs = r.RetireAtMS
			}
			break
		}
		select {
		case <-changed:
		case <-wctx.Done():
			waiting = false
		}
	}
	resp.Roots, _ = s.caView()
	return connect.NewResponse(resp), nil
}

// CertTimes is the LabelCertTimes value for a certificate that expires at
// notAfter and is due for renewal at renewAt.
func CertTimes(notAfter, renewAt time.Time) string {
	return strconv.FormatInt(notAfter.Unix(), 10) + "," + strconv.FormatInt(renewAt.Unix(), 10)
}

// ParseCertTimes reverses CertTimes, in unix ms; zeros for a value that
// does not parse (none, or from another version).
func ParseCertTimes(v string) (expiresMs, renewAtMs int64) {
	a, b, ok := strings.Cut(v, ",")
	if !ok {
		return 0, 0
	}
	exp, err1 := strconv.ParseInt(a, 10, 64)
	ren, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || exp <= 0 || ren <= 0 {
		return 0, 0
	}
	return exp * 1000, ren * 1000
}
