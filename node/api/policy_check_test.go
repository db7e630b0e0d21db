package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// newOperatorServer is newSubmitServer with the caller a registered
// operator device, the one allowed admin calls and grants by default.
func newOperatorServer(t *testing.T) (*Server, *fakeControl, context.Context) {
	t.Helper()
	js, _, _, ctl, _ := newSubmitServer(t)
	addMember(t, ctl, &raftpb.Member{Kind: "device", Id: "d-operator1", Operator: true, AddedAtMs: 1, AddedBy: "init"})
	ctx := context.WithValue(context.Background(), principalKey{}, identity.Principal{Kind: identity.KindDevice, ID: "d-operator1"})
	return js.s, ctl, ctx
}

func addMember(t *testing.T, ctl *fakeControl, m *raftpb.Member) {
	t.Helper()
	if _, err := ctl.Apply(context.Background(), &raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: m}}}); err != nil {
		t.Fatal(err)
	}
}

// 'palyra policy check' answers for any principal (a what-if), but says
// when the principal is not paired, rather than a bare "allow".
func TestCheckPolicyWarnsOfUnknownPrincipal(t *testing.T) {
	s, ctl, ctx := newOperatorServer(t)
	addMember(t, ctl, &raftpb.Member{Kind: "device", Id: "d-known1", AddedAtMs: 1, AddedBy: "init"})
	check := func(principal string) *palyrav1.CheckPolicyResponse {
		t.Helper()
		resp, err := policyService{s}.CheckPolicy(ctx, connect.NewRequest(&palyrav1.CheckPolicyRequest{Principal: principal, Action: "job.submit"}))
		if err != nil {
			t.Fatalf("check %s: %v", principal, err)
		}
		return resp.Msg
	}
	if m := check("device:d-known1"); !m.Allow || len(m.Warnings) != 0 {
		t.Errorf("a paired device: allow=%v warnings %q; want allow, no warning", m.Allow, m.Warnings)
	}
	m := check("device:d-nonexist")
	if !m.Allow || m.Explanation != "allow by policy devices" {
		t.Errorf("an unknown device: %q; the check must still decide", m.Explanation)
	}
	if len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], `no device "d-nonexist"`) || !strings.Contains(m.Warnings[0], "palyra device list") {
		t.Errorf("an unknown device: warnings %q, want one naming it and 'palyra device list'", m.Warnings)
	}
}
