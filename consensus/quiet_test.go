package consensus

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestQuietAppendsAnswersOnlyKnownRepeats(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newQuietAppends(func() time.Time { return now })
	const peer = raft.ServerAddress("f1")
	empty := func(commit uint64) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 10, PrevLogTerm: 3, LeaderCommitIndex: commit}
	}
	hb := &raft.AppendEntriesRequest{Term: 3}
	ok := &raft.AppendEntriesResponse{Term: 3, LastLog: 10, Success: true}
	var resp raft.AppendEntriesResponse

	if q.answer(peer, empty(10), &resp) {
		t.Fatal("answered with nothing sent before")
	}
	q.sent(peer, empty(10), ok, nil, now)
	if !q.answer(peer, empty(10), &resp) || resp.Term != ok.Term || resp.LastLog != ok.LastLog || !resp.Success {
		t.Fatalf("an identical repeat was sent (or answered %+v)", resp)
	}
	// A changed commit index, term or previous entry, or entries: sent.
	for name, req := range map[string]*raft.AppendEntriesRequest{
		"commit":  empty(11),
		"term":    {Term: 4, PrevLogEntry: 10, PrevLogTerm: 3, LeaderCommitIndex: 10},
		"prev":    {Term: 3, PrevLogEntry: 11, PrevLogTerm: 3, LeaderCommitIndex: 10},
		"entries": {Term: 3, PrevLogEntry: 10, PrevLogTerm: 3, LeaderCommitIndex: 10, Entries: []*raft.Log{{Index: 11}}},
	} {
		if q.answer(peer, req, &resp) {
			t.Errorf("%s: answered locally", name)
		}
	}
	if q.answer(peer, hb, &resp) {
		t.Fatal("a heartbeat was answered locally")
	}
	if q.answer("f2", empty(10), &resp) {
		t.Fatal("another follower's answer was used")
	}

	// Without a recent answer from the follower (heartbeats stopped
	// answering), everything goes out.
	now = now.Add(quietContact)
	if q.answer(peer, empty(10), &resp) {
		t.Fatal("answered without recent contact")
	}
	q.sent(peer, hb, &raft.AppendEntriesResponse{Term: 3, Success: true}, nil, now)
	if !q.answer(peer, empty(10), &resp) {
		t.Fatal("a heartbeat's answer did not renew the contact")
	}
	// The same request is actually sent again at least every quietResend.
	now = now.Add(quietResend - quietContact)
	q.sent(peer, hb, &raft.AppendEntriesResponse{Term: 3, Success: true}, nil, now)
	if q.answer(peer, empty(10), &resp) {
		t.Fatal("not resent after quietResend")
	}
	q.sent(peer, empty(10), ok, nil, now)
	if !q.answer(peer, empty(10), &resp) {
		t.Fatal("not answered after the resend")
	}

	// A failed call, a refusal or a newer term: sent again.
	q.sent(peer, hb, nil, errors.New("connection reset"), now)
	if q.answer(peer, empty(10), &resp) {
		t.Fatal("answered after a failed call")
	}
	q.sent(peer, empty(10), ok, nil, now)
	q.sent(peer, empty(10), &raft.AppendEntriesResponse{Term: 3, LastLog: 8, Success: false}, nil, now)
	if q.answer(peer, empty(10), &resp) {
		t.Fatal("answered after a refusal")
	}
	q.sent(peer, empty(10), ok, nil, now)
	q.sent(peer, hb, &raft.AppendEntriesResponse{Term: 4}, nil, now)
	if q.answer(peer, empty(10), &resp) {
		t.Fatal("answered after the follower reported a newer term")
	}
}

// With real raft on three servers: an idle leader answers repeats itself,
// writes still reach every follower, and a follower restarted while idle
// learns what was committed without another write.
func TestQuietReplicationOnThreeServers(t *testing.T) {
	c := newThreeServers(t)
	leader := c.stores[c.leader]
	if _, err := leader.Apply(context.Background(), submit("q1")); err != nil {
		t.Fatal(err)
	}
	c.everywhere(t, "q1")
	// Idle: the replication loop repeats itself every CommitTimeout, and
	// the repeats are answered here.
	before := leader.transport.quiet.answered.Load()
	for deadline := time.Now().Add(10 * time.Second); leader.transport.quiet.answered.Load() == before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle leader sent every repeated empty append")
		}
	}
	if _, err := leader.Apply(context.Background(), submit("q2")); err != nil {
		t.Fatal(err)
	}
	c.everywhere(t, "q2")

	// Restart a follower on its data dir while the cluster is idle: it
	// must learn the commit index (and so apply q3) without a new write.
	f := (c.leader + 1) % 3
	if _, err := leader.Apply(context.Background(), submit("q3")); err != nil {
		t.Fatal(err)
	}
	c.stores[f].Close()
	c.stores[f] = nil
	var l tcpLayer
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ln, err := net.Listen("tcp", c.layers[f].Addr().String())
		if err == nil {
			l = tcpLayer{ln}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebind %s: %v", c.layers[f].Addr(), err)
		}
	}
	c.stores[f] = c.open(t, f, l)
	c.everywhere(t, "q3")
}
