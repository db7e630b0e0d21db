package api

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// TestNodeWorkDecisions: node work follows the policy (one node forbidden
// worker.heartbeat is refused, the others not); a stored policy that
// refuses every node (one from before node_work was enforced: 'policy
// set' refuses such a policy now) does not stop the cluster: node work is
// allowed until a policy that permits it is set.
func TestNodeWorkDecisions(t *testing.T) {
	ctl := &fakeControl{fsm: consensus.NewFSM()}
	apply := func(c *raftpb.Command) {
		t.Helper()
		if _, err := ctl.Apply(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"n-1", "n-2"} {
		apply(&raftpb.Command{Cmd: &raftpb.Command_AddMember{AddMember: &raftpb.AddMember{Member: &raftpb.Member{Kind: "node", Id: id}}}})
	}
	setPolicy := func(src string) {
		apply(&raftpb.Command{Cmd: &raftpb.Command_SetPolicy{SetPolicy: &raftpb.SetPolicy{Source: []byte(src)}}})
	}
	def := string(policy.DefaultPolicy())
	noNodes := strings.Replace(def, `Palyra::Action::"node_work",`, ``, 1)
	if noNodes == def {
		t.Fatal("the default policy's nodes permit changed; update this test")
	}
	setPolicy(noNodes)
	a, err := NewAuthorizer(ctl.State(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	node := func(id string) identity.Principal { return identity.Principal{Kind: identity.KindNode, ID: id} }
	for _, action := range []string{policy.ActionWorkerHeartbeat, policy.ActionRaftJoin, policy.ActionBlobFetch} {
		if err := a.NodeWork(node("n-1"), action, ""); err != nil {
			t.Fatalf("%s under a stored policy that refuses every node: %v", action, err)
		}
	}

	setPolicy(def + "\n@id(\"no-n2\")\nforbid (principal == Palyra::Node::\"n-2\", action == Palyra::Action::\"worker.heartbeat\", resource);\n")
	a.reload()
	if err := a.NodeWork(node("n-2"), policy.ActionWorkerHeartbeat, ""); err == nil || !strings.Contains(err.Error(), "no-n2") {
		t.Fatalf("a forbidden node's heartbeat: %v", err)
	}
	if err := a.NodeWork(node("n-1"), policy.ActionWorkerHeartbeat, ""); err != nil {
		t.Fatalf("another node's heartbeat: %v", err)
	}
}
