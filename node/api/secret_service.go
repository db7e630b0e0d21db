package api

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

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

// secretNameRE is the rule for secret names, the same as for the secrets a
// skill manifest names: names travel in flags, policies (Grant::"NAME"),
// manifests and logs, so they are kept to characters that need no quoting.
var secretNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// secretNameRule describes secretNameRE to people.
const secretNameRule = "1 to 128 letters, digits, '.', '_' or '-', not starting with '-' (it reads as a flag), nor '.' or '..'"

// checkSecretName refuses a name a secret may not have. Only setting a
// secret checks it: a secret stored under an older, looser rule can still
// be deleted.
func checkSecretName(name string) error {
	if secretNameRE.MatchString(name) && !strings.HasPrefix(name, "-") && name != "." && name != ".." {
		return nil
	}
	what := fmt.Sprintf("secret name %q is not valid", name)
	if name == "" {
		what = "the secret name is empty"
	} else if len(name) > 128 {
		what = fmt.Sprintf("secret name %.20q… is %d bytes long", name, len(name))
	}
	return invalid(what+": a name is "+secretNameRule, "e.g. palyra secret set api-token")
}

// checkSecretsExist refuses a job that asks for secrets the cluster does
// not hold: it could only fail when it runs. A name missing from this
// node's replica is looked up again after a linearizable read, so a secret
// set a moment ago through another node counts.
func (s *Server) checkSecretsExist(ctx context.Context, names []string) error {
	missing := func() []string {
		var out []string
		for _, n := range names {
			if _, ok := s.control.State().Secret(n); !ok && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		return out
	}
	miss := missing()
	if len(miss) == 0 {
		return nil
	}
	if err := s.control.VerifyRead(ctx); err != nil {
		return fromErr(err)
	}
	if miss = missing(); len(miss) == 0 {
		return nil
	}
	what := "no secret named " + strconv.Quote(miss[0]) + " (the job asks for it with --secret)"
	if len(miss) > 1 {
		q := make([]string, len(miss))
		for i, n := range miss {
			q[i] = strconv.Quote(n)
		}
		what = "no secrets named " + strings.Join(q, ", ") + " (the job asks for them with --secret)"
	}
	return apiError(connect.CodeFailedPrecondition, "secret_not_found", what+"; nothing was submitted",
		"check the names with 'palyra secret list', or store the secret first with 'palyra secret set NAME'")
}

func (ss secretService) SetSecret(ctx context.Context, req *connect.Request[palyrav1.SetSecretRequest]) (*connect.Response[palyrav1.SetSecretResponse], error) {
	s, m := ss.s, req.Msg
	if err := s.authz.Check(ctx, policy.ActionSecretSet, policy.ClusterResource(), nil); err != nil {
		return nil, err
	}
	if err := checkSecretName(m.Name); err != nil {
		return nil, err
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
