package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func setSecret(s *Server, ctx context.Context, name string) error {
	_, err := secretService{s}.SetSecret(ctx, connect.NewRequest(&palyrav1.SetSecretRequest{Name: name, Value: []byte("v")}))
	return err
}

// Secret names are checked on the node (the CLI is not the only client):
// letters, digits, '.', '_' and '-', 1 to 128 of them, the rule skill
// manifests already follow; a refusal names the rule.
func TestSetSecretNames(t *testing.T) {
	s, _, ctx := newOperatorServer(t)
	s.Seal = func(_ string, v []byte) ([]byte, error) { return v, nil }
	for _, good := range []string{"api-token", "tok", "GITHUB_TOKEN", "db.password", strings.Repeat("a", 128)} {
		if err := setSecret(s, ctx, good); err != nil {
			t.Errorf("secret name %q refused: %v", good, err)
		}
	}
	for _, bad := range []string{"bad name!", "", "a/b", "tab\tname", "naïve", "*", strings.Repeat("a", 129), "--json", "-lead", ".", ".."} {
		err := setSecret(s, ctx, bad)
		if err == nil {
			t.Errorf("secret name %q accepted", bad)
			continue
		}
		if pe := apiCode(t, err); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(pe.Message, "letters, digits, '.', '_' or '-'") {
			t.Errorf("secret name %q: %v, message %q; want invalid_argument naming the rule", bad, err, pe.Message)
		}
		if _, ok := s.control.State().Secret(bad); ok {
			t.Errorf("secret %q stored", bad)
		}
	}
}

// A job that asks for a secret the cluster does not hold is refused at
// submission, naming the missing secrets and where to see the names,
// rather than accepted to fail when it runs; an array is one submission.
func TestSubmitRefusesMissingSecrets(t *testing.T) {
	s, ctl, ctx := newOperatorServer(t)
	s.Seal = func(_ string, v []byte) ([]byte, error) { return v, nil }
	if err := setSecret(s, ctx, "api-token"); err != nil {
		t.Fatal(err)
	}
	js := jobService{s}
	for _, req := range []*palyrav1.SubmitJobRequest{
		{WasmModule: tinyModule("one"), SecretNames: []string{"api-token", "nosuch"}},
		{WasmModule: tinyModule("array"), SecretNames: []string{"nosuch", "api-token", "other"}, Inputs: [][]byte{[]byte("a"), []byte("b")}},
	} {
		_, err := js.SubmitJob(ctx, connect.NewRequest(req))
		if err == nil {
			t.Fatalf("submit with secrets %q accepted", req.SecretNames)
		}
		pe := apiCode(t, err)
		if pe.Code != "secret_not_found" || !strings.Contains(pe.Message, `"nosuch"`) || strings.Contains(pe.Message, `"api-token"`) ||
			!strings.Contains(pe.Hint, "palyra secret list") {
			t.Errorf("submit with secrets %q: %s %q hint %q; want secret_not_found naming the missing ones and 'palyra secret list'", req.SecretNames, pe.Code, pe.Message, pe.Hint)
		}
		if len(req.SecretNames) == 3 && !strings.Contains(pe.Message, `"other"`) {
			t.Errorf("message %q does not name every missing secret", pe.Message)
		}
	}
	if n := len(ctl.State().Jobs(consensus.JobFilter{})); n != 0 {
		t.Fatalf("%d jobs committed by refused submissions", n)
	}
	if _, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: tinyModule("ok"), SecretNames: []string{"api-token"}})); err != nil {
		t.Fatalf("submit with a secret that exists: %v", err)
	}
}
