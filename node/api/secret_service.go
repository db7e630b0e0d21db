package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// secretService stores secrets sealed with the cluster data key. Values
// are never logged and never returned: jobs read them only via a grant.
type secretService struct{ s *Server }

func secretInfo(sec *consensus.Secret) *palyrav1.SecretInfo {
	return &palyrav1.SecretInfo{Name: sec.Name, SetAtMs: sec.SetAtMS, SetBy: sec.SetBy}
}

func (ss secretService) SetSecret(ctx context.Context, req *connect.Request[palyrav1.SetSecretRequest]) (*connect.Response[palyrav1.SetSecretResponse], error) {
	s, m := ss.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionSecretSet, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if m.Name == "" || len(m.Name) > 256 {
		return nil, invalid("secret name must be 1 to 256 characters", "e.g. palyra secret set api-token")
	}
	if len(m.Value) > consensus.MaxSecretLen {
		return nil, invalid(fmt.Sprintf("secret value is over %d bytes", consensus.MaxSecretLen), "store large material elsewhere and grant a token to it")
	}
	if s.Seal == nil {
		return nil, apiError(connect.CodeFailedPrecondition, "no_data_key", "this node cannot seal secrets", "")
	}
	sealed, err := s.Seal(m.Name, m.Value)
	if err != nil {
		return nil, fromErr(err)
	}
	caller, _ := PrincipalFrom(ctx)
	if _, err := s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SetSecret{SetSecret: &raftpb.SetSecret{
		Name: m.Name, Sealed: sealed, AtMs: s.now().UnixMilli(), By: caller.String()}}}); err != nil {
		return nil, fromErr(err)
	}
	s.log.Info("secret set", "name", m.Name, "by", caller) // the name only, never the value
	sec, _ := s.control.State().Secret(m.Name)
	return connect.NewResponse(&palyrav1.SetSecretResponse{Secret: secretInfo(&sec)}), nil
}

func (ss secretService) ListSecrets(ctx context.Context, _ *connect.Request[palyrav1.ListSecretsRequest]) (*connect.Response[palyrav1.ListSecretsResponse], error) {
	if err := ss.s.authz.Check(ctx, policy.ActionSecretList, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	resp := &palyrav1.ListSecretsResponse{}
	for _, sec := range ss.s.control.State().Secrets() {
		resp.Secrets = append(resp.Secrets, secretInfo(&sec))
	}
	return connect.NewResponse(resp), nil
}

func (ss secretService) DeleteSecret(ctx context.Context, req *connect.Request[palyrav1.DeleteSecretRequest]) (*connect.Response[palyrav1.DeleteSecretResponse], error) {
	if err := ss.s.authz.Check(ctx, policy.ActionSecretDelete, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	caller, _ := PrincipalFrom(ctx)
	if _, err := ss.s.control.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_DeleteSecret{DeleteSecret: &raftpb.DeleteSecret{
		Name: req.Msg.Name, By: caller.String(), AtMs: ss.s.now().UnixMilli()}}}); err != nil {
		return nil, fromErr(err)
	}
	return connect.NewResponse(&palyrav1.DeleteSecretResponse{}), nil
}
