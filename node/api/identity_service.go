package api

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/palyrav1/palyrav1connect"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

type identityService struct{ s *Server }

func pairingToPB(p *consensus.Pairing, nowMS int64) *palyrav1.Pairing {
	state := p.State.String()
	if p.State == consensus.PairingPending && nowMS >= p.ExpiresAtMS {
		state = "expired"
	}
	return &palyrav1.Pairing{Id: p.ID, Kind: p.Kind, Name: p.Name, Operator: p.Operator, State: state,
		CreatedAtMs: p.CreatedAtMS, ExpiresAtMs: p.ExpiresAtMS, CreatedBy: p.CreatedBy, UsedBy: p.UsedBy}
}

func memberToPB(m *consensus.Member) *palyrav1.Member {
	return &palyrav1.Member{Kind: m.Kind, Id: m.ID, Name: m.Name, Operator: m.Operator, Revoked: m.Revoked,
		AddedAtMs: m.AddedAtMS, RevokedAtMs: m.RevokedAtMS, AddedBy: m.AddedBy}
}

func (is identityService) CreatePairing(ctx context.Context, req *connect.Request[palyrav1.CreatePairingRequest]) (*connect.Response[palyrav1.CreatePairingResponse], error) {
	s, m := is.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionPairCreate, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	kind := identity.Kind(strings.ToLower(m.Kind))
	if !kind.Valid() {
		return nil, invalid(fmt.Sprintf("unknown kind %q", m.Kind), "use --kind node or --kind device")
	}
	if m.Operator && kind != identity.KindDevice {
		return nil, invalid("--operator applies to device codes only", "drop --operator, or use --kind device")
	}
	if err := checkName("--name", m.Name); err != nil {
		return nil, err
	}
	ttl := time.Duration(m.TtlMs) * time.Millisecond
	if ttl == 0 {
		ttl = pairing.DefaultTTL
	}
	if ttl < pairing.MinTTL || ttl > pairing.MaxTTL {
		return nil, invalid(fmt.Sprintf("ttl %s is out of range", ttl), "use --ttl between 30s and 24h")
	}
	fp := s.caFingerprint()
	if !s.canSign() && s.noVoterHoldsCAKey(fp) {
		return nil, apiError(connect.CodeFailedPrecondition, "no_ca_key",
			"no voter of this cluster holds the key of its CA root, so no node can sign a certificate: a code could never be used, and certificates cannot be renewed either",
			"this cluster was likely recovered ('palyra node recover') from a node without the CA: restore the newest snapshot instead ('palyra snapshot restore' carries the CA), or recover a voter that held it")
	}
	caller, _ := PrincipalFrom(ctx)
	for attempt := 0; ; attempt++ {
		code, err := pairing.New(kind, fp)
		if err != nil {
			return nil, fromErr(err)
		}
		now := s.now().UnixMilli()
		rec, err := code.Record(caller.String(), now, ttl)
		if err != nil {
			return nil, invalid(err.Error(), "use --ttl between 30s and 24h")
		}
		p := consensus.Pairing{ID: rec.ID, Kind: rec.Kind, Name: m.Name, Operator: m.Operator, SecretHash: rec.SecretHash,
			CreatedAtMS: now, ExpiresAtMS: rec.ExpiresAtMS, CreatedBy: rec.CreatedBy,
			State: consensus.PairingPending} // as applied: the answer said "unknown"
		_, err = s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_CreatePairing{CreatePairing: &raftpb.CreatePairing{Pairing: consensus.PairingPB(&p)}}})
		if errors.Is(err, consensus.ErrConflict) && attempt < 3 {
			continue // id collision: draw another code
		}
		if err != nil {
			return nil, fromErr(err)
		}
		s.log.Info("pairing code created", "id", p.ID, "kind", p.Kind, "by", caller, "expires", time.UnixMilli(p.ExpiresAtMS).UTC())
		return connect.NewResponse(&palyrav1.CreatePairingResponse{Pairing: pairingToPB(&p, now), Code: code.String()}), nil
	}
}

func (is identityService) ListPairings(ctx context.Context, _ *connect.Request[palyrav1.ListPairingsRequest]) (*connect.Response[palyrav1.ListPairingsResponse], error) {
	if err := is.s.authz.Check(ctx, policy.ActionPairList, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	now := is.s.now().UnixMilli()
	resp := &palyrav1.ListPairingsResponse{}
	st := is.s.control.State()
	for _, p := range st.Pairings() {
		pb := pairingToPB(&p, now)
		if pb.State == "pending" && pinsARetiredRoot(&p, st.Trust()) {
			pb.State = "stale"
		}
		resp.Pairings = append(resp.Pairings, pb)
	}
	return connect.NewResponse(resp), nil
}

// pinsARetiredRoot reports whether a code pins a CA root the cluster no
// longer has: made before the active root took over, with that root the
// only one left (a rotation's overlap has ended). Such a code fails on
// every node ("not part of the cluster that made this code"), though the
// list called it pending.
func pinsARetiredRoot(p *consensus.Pairing, b consensus.TrustBundle) bool {
	active, ok := b.Active()
	// CrossFrom: the active root came from a rotation (the first root's
	// activation can follow codes made while the cluster started).
	return ok && active.CrossFrom != "" && len(b.Roots) == 1 && p.CreatedAtMS < active.ActivatedAtMS
}

func (is identityService) RevokePairing(ctx context.Context, req *connect.Request[palyrav1.RevokePairingRequest]) (*connect.Response[palyrav1.RevokePairingResponse], error) {
	s := is.s
	if err := s.authz.Check(ctx, policy.ActionPairRevoke, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	id := strings.ToUpper(strings.TrimSpace(req.Msg.Id))
	caller, _ := PrincipalFrom(ctx)
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RevokePairing{RevokePairing: &raftpb.RevokePairing{
		Id: id, AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil {
		return nil, fromErr(err)
	}
	for _, p := range s.control.State().Pairings() {
		if p.ID == id {
			return connect.NewResponse(&palyrav1.RevokePairingResponse{Pairing: pairingToPB(&p, s.now().UnixMilli())}), nil
		}
	}
	return connect.NewResponse(&palyrav1.RevokePairingResponse{}), nil
}

// Pair is the one call open to a peer without a cluster certificate. It is
// rate-limited per source before any work and relayed to a node that can
// sign when this one cannot. It is atomic: the code is checked through Raft
// without being used (a wrong secret still counts against it), then the CSR
// is signed, and only then is the code consumed and the member added, in
// one command that refuses a code used meanwhile. A failed signature leaves
// the code unused and no member registered.
func (is identityService) Pair(ctx context.Context, req *connect.Request[palyrav1.PairRequest]) (*connect.Response[palyrav1.PairResponse], error) {
	s, m := is.s, req.Msg
	if addr, err := net.ResolveUDPAddr("udp", req.Peer().Addr); err == nil {
		if ok, retry := s.Limiter.Allow(addr); !ok {
			return nil, apiError(connect.CodeResourceExhausted, "rate_limited",
				"too many pairing attempts from this address", fmt.Sprintf("wait %s and try again", retry.Round(time.Second)))
		}
	}
	if !s.canSign() {
		if caller, ok := PrincipalFrom(ctx); ok && caller.Kind == identity.KindNode {
			// Relayed here by a node that believed this one signs: one hop only.
			return nil, apiError(connect.CodeUnavailable, "no_signer", "this node holds no key of the cluster's active CA root either", "try again")
		}
		// Relay to a node that holds the key; the code is still checked and
		// consumed through Raft there, once, cluster-wide.
		var out *palyrav1.PairResponse
		err := is.forward(ctx, func(ctx context.Context, ic palyrav1connect.IdentityServiceClient) error {
			resp, err := ic.Pair(ctx, connect.NewRequest(m))
			if err == nil {
				out = resp.Msg
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(out), nil
	}
	kind := identity.Kind(m.Kind)
	p := identity.Principal{Kind: kind, ID: m.MemberId}
	if err := p.Validate(); err != nil {
		return nil, invalid(err.Error(), "use the palyra CLI to pair; it picks a valid id")
	}
	csr, err := x509.ParseCertificateRequest(m.CsrDer)
	if err == nil {
		err = csr.CheckSignature()
	}
	if err != nil {
		return nil, invalid(fmt.Sprintf("bad certificate request: %v", err), "use the palyra CLI to pair")
	}
	if len(m.Secret) == 0 || len(m.Secret) > 64 {
		return nil, invalid("missing or malformed pairing secret", "type the whole code")
	}
	if err := checkName("the name", m.Name); err != nil {
		return nil, err
	}
	if err := checkName("the host name", m.HostName); err != nil {
		return nil, err
	}
	for k, v := range m.Labels {
		if err := palyrav1.CheckText("label", k+"="+v); err != nil {
			return nil, invalid(err.Error(), "give labels of printable text: --label k=v")
		}
	}
	name := m.Name
	if name == "" {
		// The code's name wins over the joiner's host name (the FSM gives
		// the code's to a member without one). A code made through
		// another node a moment ago is seen once this replica is current.
		_ = s.control.VerifyRead(ctx)
		name = m.HostName
		for _, pr := range s.control.State().Pairings() {
			if pr.ID == m.PairingId && pr.Name != "" {
				name = ""
			}
		}
	}
	member := &raftpb.Member{Kind: string(kind), Id: p.ID, Name: name, Labels: m.Labels}
	// A joining node may ask for a local operator credential for its
	// machine; the code must grant one (checked in the FSM).
	var opP identity.Principal
	var localOp *raftpb.Member
	if len(m.OperatorCsrDer) > 0 {
		opP = identity.Principal{Kind: identity.KindDevice, ID: m.OperatorId}
		if kind != identity.KindNode {
			return nil, invalid("only a joining node asks for a local operator credential", "pair a device with 'palyra device pair'")
		}
		if err := opP.Validate(); err != nil {
			return nil, invalid("local operator: "+err.Error(), "use the palyra CLI to pair; it picks a valid id")
		}
		ocsr, err := x509.ParseCertificateRequest(m.OperatorCsrDer)
		if err == nil {
			err = ocsr.CheckSignature()
		}
		if err != nil {
			return nil, invalid(fmt.Sprintf("bad certificate request for the local operator: %v", err), "use the palyra CLI to pair")
		}
		localOp = &raftpb.Member{Kind: string(identity.KindDevice), Id: opP.ID}
	}
	consume := func(dryRun bool) error {
		_, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_ConsumePairing{ConsumePairing: &raftpb.ConsumePairing{
			Id: strings.ToUpper(m.PairingId), PresentedSecretHash: pairing.SecretHash(m.Secret), AtMs: s.now().UnixMilli(),
			Member: member, DryRun: dryRun, LocalOperator: localOp}}})
		return err
	}
	if err := consume(true); err != nil {
		s.log.Warn("pairing refused", "pairing", m.PairingId, "peer", req.Peer().Addr, "err", err)
		return nil, fromErr(err)
	}
	chain, err := s.Issuer.Sign(ctx, m.CsrDer, p, s.CertTTL)
	if err != nil {
		s.log.Warn("pairing: signing failed; the code stays unused", "pairing", m.PairingId, "err", err)
		if errors.Is(err, identity.ErrBadCSR) {
			return nil, invalid(err.Error(), "use the palyra CLI to pair; the code was not used")
		}
		return nil, apiError(connect.CodeUnavailable, "unavailable", "could not sign the certificate: "+err.Error(),
			"try again with the same code; it was not used")
	}
	var opChain []*x509.Certificate
	if localOp != nil {
		if opChain, err = s.Issuer.Sign(ctx, m.OperatorCsrDer, opP, s.CertTTL); err != nil {
			s.log.Warn("pairing: signing the local operator failed; the code stays unused", "pairing", m.PairingId, "err", err)
			return nil, apiError(connect.CodeUnavailable, "unavailable", "could not sign the local operator's certificate: "+err.Error(),
				"try again with the same code; it was not used")
		}
	}
	if err := consume(false); err != nil {
		s.log.Warn("pairing refused after signing; the certificate is discarded", "pairing", m.PairingId, "err", err)
		return nil, fromErr(err)
	}
	roots := s.Issuer.Roots()
	resp := &palyrav1.PairResponse{RootDer: roots[0].Raw, ClusterName: s.info.ClusterName, Principal: p.String()}
	for _, r := range roots {
		resp.RootsDer = append(resp.RootsDer, r.Raw)
	}
	for _, c := range chain {
		resp.ChainDer = append(resp.ChainDer, c.Raw)
	}
	for _, c := range opChain {
		resp.OperatorChainDer = append(resp.OperatorChainDer, c.Raw)
	}
	if s.Peers != nil {
		resp.Peers = s.Peers()
	}
	if kind == identity.KindNode {
		resp.DataKey = s.DataKey
	}
	s.log.Info("paired", "principal", p, "pairing", m.PairingId, "peer", req.Peer().Addr)
	return connect.NewResponse(resp), nil
}

// Renew signs a new certificate for the caller's own principal. A node may
// relay another principal's renewal (relay_chain_der): then the principal
// is the relayed certificate's, and the request must carry that
// certificate's proof. A node that cannot sign relays the request, with the
// caller's certificate and proof, to one that can.
func (is identityService) Renew(ctx context.Context, req *connect.Request[palyrav1.RenewRequest]) (*connect.Response[palyrav1.RenewResponse], error) {
	s, m := is.s, req.Msg
	caller, ok := PrincipalFrom(ctx)
	if !ok {
		return nil, apiError(connect.CodeUnauthenticated, "unauthenticated", "renewal needs the current certificate", "")
	}
	subject, relayed := caller, len(m.RelayChainDer) > 0
	if relayed {
		if caller.Kind != identity.KindNode {
			return nil, apiError(connect.CodePermissionDenied, "permission_denied", "only nodes relay renewals", "renew your own certificate: send no relay_chain_der")
		}
		pool := x509.NewCertPool()
		if s.Issuer != nil {
			for _, r := range s.Issuer.Roots() {
				pool.AddCert(r)
			}
		}
		p, err := identity.VerifyRenewal(m.RelayChainDer, pool, m.CsrDer, m.Proof, s.revocationCheck)
		if err != nil {
			return nil, apiError(connect.CodePermissionDenied, "permission_denied", "relayed renewal refused: "+err.Error(), "")
		}
		subject = p
	}
	if !s.canSign() {
		if relayed {
			return nil, apiError(connect.CodeUnavailable, "no_signer", "this node holds no key of the cluster's active CA root either", "retry: renewals go to a voter")
		}
		if len(m.Proof) == 0 {
			return nil, apiError(connect.CodeFailedPrecondition, "no_signer",
				"this node holds no CA key, and relaying the renewal needs the caller's proof (sent by current palyra releases)",
				"upgrade the client, or renew through a voter ('palyra nodes' shows them)")
		}
		fwd := &palyrav1.RenewRequest{CsrDer: m.CsrDer, Proof: m.Proof}
		for _, c := range peerChain(ctx) {
			fwd.RelayChainDer = append(fwd.RelayChainDer, c.Raw)
		}
		var out *palyrav1.RenewResponse
		err := is.forward(ctx, func(ctx context.Context, ic palyrav1connect.IdentityServiceClient) error {
			resp, err := ic.Renew(ctx, connect.NewRequest(fwd))
			if err == nil {
				out = resp.Msg
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(out), nil
	}
	if err := s.renewable(ctx, subject, renewedLeaf(ctx, m)); err != nil {
		return nil, err
	}
	chain, err := s.Issuer.Sign(ctx, m.CsrDer, subject, s.CertTTL)
	if err != nil {
		if errors.Is(err, identity.ErrBadCSR) {
			return nil, invalid(fmt.Sprintf("renewal refused: %v", err), "the CSR must be for the caller's own principal")
		}
		return nil, apiError(connect.CodeUnavailable, "unavailable", "renewal failed: "+err.Error(), "retry")
	}
	resp := &palyrav1.RenewResponse{}
	for _, c := range chain {
		resp.ChainDer = append(resp.ChainDer, c.Raw)
	}
	for _, r := range s.Issuer.Roots() {
		resp.RootsDer = append(resp.RootsDer, r.Raw)
	}
	if relayed {
		s.log.Info("renewed a relayed certificate", "principal", subject, "relay", caller)
	}
	return connect.NewResponse(resp), nil
}

// noVoterHoldsCAKey reports whether gossip shows, for certain, that no
// voter holds the key of root fp: every voter is alive (so its labels are
// known) and none lists it. A voter not heard from may hold it.
func (s *Server) noVoterHoldsCAKey(fp string) bool {
	if s.Members == nil || fp == "" {
		return false
	}
	voters := 0
	for _, m := range s.Members() {
		if !m.Voter {
			continue
		}
		if m.State != cluster.StateAlive || slices.Contains(strings.Split(m.Labels[LabelCAKeys], ","), prefix(fp)) {
			return false
		}
		voters++
	}
	return voters > 0
}

// canSign reports whether this node signs certificates itself.
func (s *Server) canSign() bool { return s.Issuer != nil && s.Issuer.CanSign() }

// forward relays a call to a node that can sign.
func (is identityService) forward(ctx context.Context, fn func(context.Context, palyrav1connect.IdentityServiceClient) error) error {
	if is.s.Forward == nil {
		return apiError(connect.CodeFailedPrecondition, "no_signer", "this node holds no key of the cluster CA",
			"call a voter ('palyra nodes' shows them)")
	}
	if err := is.s.Forward(ctx, fn); err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return ce
		}
		return apiError(connect.CodeUnavailable, "no_signer", err.Error(), "retry in a few seconds; a voter takes over signing when one is lost")
	}
	return nil
}

// renewedLeaf is the certificate a renewal replaces: the relayed one, or
// the caller's own.
func renewedLeaf(ctx context.Context, m *palyrav1.RenewRequest) *x509.Certificate {
	if len(m.RelayChainDer) > 0 {
		c, err := x509.ParseCertificate(m.RelayChainDer[0])
		if err != nil {
			return nil
		}
		return c
	}
	if chain := peerChain(ctx); len(chain) > 0 {
		return chain[0]
	}
	return nil
}

// renewable refuses to renew a certificate the ledger does not hold for
// p (with the replica made current first), whatever let its connection
// through: a certificate signed with a copied CA key, accepted by a node
// that could not judge it or relayed by another node, must not be turned
// into a recorded one.
func (s *Server) renewable(ctx context.Context, p identity.Principal, leaf *x509.Certificate) error {
	if leaf == nil {
		return apiError(connect.CodeUnauthenticated, "unauthenticated", "renewal needs the current certificate", "")
	}
	st := s.control.State()
	if _, _, started := st.CertLedgerStarted(); !started || !s.control.SeenSupport(cluster.FeatureCertLedger) {
		return nil
	}
	v, why := st.CertStatus(leaf, string(p.Kind), p.ID)
	if v == consensus.CertUnknown {
		vctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := s.control.VerifyRead(vctx)
		cancel()
		if err != nil {
			return apiError(connect.CodeUnavailable, "no_quorum", "cannot check the certificate against the cluster's ledger: "+err.Error(), "retry once the cluster has a leader")
		}
		v, why = s.control.State().CertStatus(leaf, string(p.Kind), p.ID)
	}
	if v == consensus.CertUnknown || v == consensus.CertMismatch {
		return apiError(connect.CodePermissionDenied, "permission_denied", "renewal refused: "+why, "pair again with a new code ('palyra pair create')")
	}
	return nil
}

// revocationCheck refuses revoked principals and certificates.
func (s *Server) revocationCheck(p identity.Principal, leaf *x509.Certificate) error {
	st := s.control.State()
	if st.IsRevoked(string(p.Kind), p.ID) {
		return fmt.Errorf("%s has been revoked", p)
	}
	if st.IsSerialRevoked(leaf.SerialNumber.String()) {
		return fmt.Errorf("certificate %s has been revoked", leaf.SerialNumber)
	}
	return nil
}

func (is identityService) ListDevices(ctx context.Context, _ *connect.Request[palyrav1.ListDevicesRequest]) (*connect.Response[palyrav1.ListDevicesResponse], error) {
	if err := is.s.authz.Check(ctx, policy.ActionDeviceList, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	resp := &palyrav1.ListDevicesResponse{}
	for _, m := range is.s.control.State().Members("device") {
		resp.Devices = append(resp.Devices, memberToPB(&m))
	}
	return connect.NewResponse(resp), nil
}

func (is identityService) RevokeMember(ctx context.Context, req *connect.Request[palyrav1.RevokeMemberRequest]) (*connect.Response[palyrav1.RevokeMemberResponse], error) {
	s, m := is.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionDeviceRevoke, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	caller, _ := PrincipalFrom(ctx)
	if m.Kind == string(caller.Kind) && m.Id == caller.ID {
		return nil, invalid("refusing to revoke the credential making this call", "revoke it from another operator device")
	}
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{
		Kind: m.Kind, Id: m.Id, AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil {
		return nil, fromErr(err)
	}
	mem, _ := s.control.State().Member(m.Kind, m.Id)
	s.log.Info("revoked", "principal", m.Kind+":"+m.Id, "by", caller)
	return connect.NewResponse(&palyrav1.RevokeMemberResponse{Member: memberToPB(&mem)}), nil
}

// maxName bounds a member's or pairing code's name.
const maxName = 256

// checkName refuses a name a caller chose (a device's, a node's, a
// code's) that is too long or holds a control character: names are
// printed in every listing, where an escape sequence drives the reader's
// terminal.
func checkName(what, name string) error {
	if len(name) > maxName {
		return invalid(fmt.Sprintf("%s is %d bytes, over the %d a name may have", what, len(name), maxName), "use a shorter --name")
	}
	if err := palyrav1.CheckText(what, name); err != nil {
		return invalid(err.Error(), "use a name of printable text, e.g. --name laptop-ana")
	}
	return nil
}
