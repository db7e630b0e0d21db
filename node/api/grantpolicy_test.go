package api

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// A policy that forbids an HTTP grant cannot be sidestepped by spelling
// the host otherwise: the policy was asked about the host as written
// (LOCALHOST, localhost., *.localhost, ::ffff:127.0.0.1) while the runtime
// matched it as the canonical host, so those jobs reached what the policy
// forbade. Hosts are canonical before the policy sees them, and the job
// keeps the canonical form. A grant is in its parent domains, so a forbid
// on `resource in Grant::"example.com"` refuses its subdomains too, and a
// public suffix (com) is refused as a grant.
func TestGrantPolicySeesCanonicalHosts(t *testing.T) {
	js, _, _, ctl, ctx := newSubmitServer(t)
	addMember(t, ctl, &raftpb.Member{Kind: "device", Id: "d-submitter1", Operator: true, AddedAtMs: 1, AddedBy: "init"})
	src := string(policy.DefaultPolicy()) + `
@id("no-localhost")
forbid (principal, action == Palyra::Action::"grant.http", resource == Palyra::Grant::"localhost");
@id("no-loopback")
forbid (principal, action == Palyra::Action::"grant.http", resource == Palyra::Grant::"127.0.0.1");
@id("no-internal")
forbid (principal, action == Palyra::Action::"grant.http", resource in Palyra::Grant::"internal.example");
`
	if _, err := ctl.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{Source: []byte(src)}}}); err != nil {
		t.Fatal(err)
	}
	js.s.authz.reload()
	mod := tinyModule("grantpolicy")
	script := []byte(`{"steps":[{"action":"navigate","url":"https://example.com/"}]}`)
	for _, c := range []struct{ host, policy string }{
		{"localhost", "no-localhost"}, {"LOCALHOST", "no-localhost"}, {"localhost.", "no-localhost"}, {"*.localhost", "no-localhost"},
		{"127.0.0.1", "no-loopback"}, {"::ffff:127.0.0.1", "no-loopback"}, {"[::ffff:127.0.0.1]", "no-loopback"},
		{"internal.example", "no-internal"}, {"db.Internal.Example.", "no-internal"}, {"*.a.b.internal.example", "no-internal"},
	} {
		for kind, req := range map[string]*palyrav1.SubmitJobRequest{
			"wasm":    {WasmModule: mod, AllowHosts: []string{"example.com", c.host}},
			"browser": {BrowserScript: script, AllowHosts: []string{"example.com", c.host}},
		} {
			_, err := js.SubmitJob(ctx, connect.NewRequest(req))
			if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), c.policy) {
				t.Errorf("%s job with --allow-host %q: %v; want a denial by %s", kind, c.host, err, c.policy)
			}
		}
		if _, err := js.s.checkHTTPGrants(ctx, []string{c.host}, false); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("browser session with --allow-host %q: %v; want a denial", c.host, err)
		}
	}
	if n := len(ctl.State().Jobs(consensus.JobFilter{})); n != 0 {
		t.Fatalf("%d jobs committed by denied submissions", n)
	}
	// The denial says who was refused what, and an operator (who can
	// change the policy) is told how, not to ask an operator.
	_, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod, AllowHosts: []string{"LocalHost"}}))
	if pe := apiCode(t, err); !strings.Contains(pe.Message, "which forbids device:d-submitter1 to grant.http on Grant::localhost") ||
		!strings.Contains(pe.Hint, "palyra policy set") || strings.Contains(pe.Hint, "ask an operator") {
		t.Errorf("denial %q, hint %q; want the subject named and the operator's fix", pe.Message, pe.Hint)
	}
	// A public suffix is a grant of every site under it.
	for _, h := range []string{"com", "*.com", "co.uk", "COM.", "github.io"} {
		refused(t, ctx, js, ctl, &palyrav1.SubmitJobRequest{WasmModule: mod, AllowHosts: []string{h}}, "is a public suffix", "name the hosts the job reaches")
	}

	// What is allowed is kept in canonical form, each host once.
	resp, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod,
		AllowHosts: []string{"API.Example.com.", "*.api.example.com", "::ffff:10.0.0.1", "example.internal"}}))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := ctl.State().Job(resp.Msg.Job.Id)
	if got := strings.Join(j.AllowHosts, " "); got != "api.example.com 10.0.0.1 example.internal" {
		t.Fatalf("the job keeps hosts %q; want them canonical, each once", got)
	}

}

// 'palyra policy check' asks about a host grant as a job's is asked: in
// canonical form, within its parent domains, with grant_host in the
// context. It answered "allow" for Grant::http:LOCALHOST under a forbid
// on localhost.
func TestCheckPolicyGrantIsAskedAsAJobsIs(t *testing.T) {
	s, ctl, ctx := newOperatorServer(t)
	src := string(policy.DefaultPolicy()) + `
@id("no-localhost")
forbid (principal, action == Palyra::Action::"grant.http", resource == Palyra::Grant::"localhost");
@id("no-internal")
forbid (principal, action == Palyra::Action::"grant.http", resource in Palyra::Grant::"internal.example");
@id("host-in-context")
forbid (principal, action == Palyra::Action::"grant.http", resource) when { context has grant_host && context.grant_host == "ctx.example" };
`
	if _, err := ctl.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{Source: []byte(src)}}}); err != nil {
		t.Fatal(err)
	}
	s.authz.reload()
	for res, want := range map[string]string{
		"Grant::http:LOCALHOST":          "no-localhost",
		"Grant::http:localhost.":         "no-localhost",
		"Grant::http:a.Internal.Example": "no-internal",
		"Grant::http:ctx.example":        "host-in-context",
		"Grant::http:api.example.com":    "",
	} {
		resp, err := policyService{s}.CheckPolicy(ctx, connect.NewRequest(&palyrav1.CheckPolicyRequest{Principal: "device:d-operator1", Action: "grant.http", Resource: res}))
		if err != nil {
			t.Fatalf("check %s: %v", res, err)
		}
		if m := resp.Msg; (want == "") != m.Allow || (want != "" && !strings.Contains(m.Explanation, want)) {
			t.Errorf("check %s: %q; want %q", res, m.Explanation, want)
		}
	}
	_, err := policyService{s}.CheckPolicy(ctx, connect.NewRequest(&palyrav1.CheckPolicyRequest{Principal: "device:d-operator1", Action: "grant.http", Resource: "Grant::http:x.com:80"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("check of a host with a port: %v; want invalid_argument", err)
	}
}

// A key-value key with a control character is refused: a newline or an
// escape sequence in a key forged rows of 'audit list' and 'kv list', or
// drove the terminal showing them.
func TestKVKeysWithControlCharactersAreRefused(t *testing.T) {
	for _, k := range []string{"tmp/x\n99 secret.delete", "esc\x1b[2J", "tab\there", "del\x7f"} {
		if err := checkNewKVKey(k); err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("key %q: %v; want it refused", k, err)
		}
	}
	if err := checkNewKVKey("notes/ünïcode ok"); err != nil {
		t.Errorf("a printable key refused: %v", err)
	}
	// One written before the rule can still be read and deleted.
	if err := checkKVKey("old\nkey"); err != nil {
		t.Errorf("reading an old key with a control character: %v", err)
	}
}
