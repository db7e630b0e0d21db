package cluster

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/mesh"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// A forwarded write whose reply is lost fails as unavailable with a hint
// that holds for any write (check before doing it again), not one that
// names an idempotency key: most writes have none, and the CLI, which
// knows the command, says what to do for it.
func TestLostForwardReplyHintIsGeneric(t *testing.T) {
	nodes := formCluster(t, 3, 3)
	eventually(t, 20*time.Second, "3-voter cluster", func() error { return converged(nodes, 3, 0) })
	leader := leaderOf(t, nodes)
	follower := others(nodes, leader)[0]
	// The leader reads each forwarded request and never answers it.
	leader.tr.Handle(mesh.TagRPC, func(conn net.Conn, _ mesh.PeerInfo) {
		var req peerpb.Request
		readFrame(conn, &req)
	})
	_, err := follower.cl.Apply(ctxFor(t, 10*time.Second), submit("lost-reply"))
	var ce *consensus.Error
	if !errors.As(err, &ce) || ce.Code != codeUnavailable || !strings.Contains(ce.Message, "may or may not have committed") {
		t.Fatalf("a forward whose reply was lost: %v; want unavailable, outcome unknown", err)
	}
	if ce.Hint != unknownOutcomeHint || strings.Contains(ce.Hint, "retry with the same idempotency key") {
		t.Fatalf("hint %q; want the generic one, %q", ce.Hint, unknownOutcomeHint)
	}
}
