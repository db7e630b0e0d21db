package consensus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	var layers []tcpLayer
	for range 3 {
		layers = append(layers, newLayer(t))
	}
	servers := make([]raft.Server, 3)
	dirs := make([]string, 3)
	for i := range layers {
		servers[i] = raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: raft.ServerAddress(layers[i].Addr().String())}
		dirs[i] = t.TempDir()
	}
	open := func(i int, l tcpLayer) *Store {
		s, err := Open(Config{Dir: dirs[i], NodeID: fmt.Sprintf("n%d", i), Advertise: l.Addr().String(), Layer: l,
			Logger: slog.New(slog.DiscardHandler), Tune: fast})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stores := make([]*Store, 3)
	for i, l := range layers {
		stores[i] = open(i, l)
	}
	defer func() {
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
	}()
	if err := stores[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	leader := -1
	for deadline := time.Now().Add(10 * time.Second); leader < 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for i, s := range stores {
			if s.IsLeader() {
				leader = i
			}
		}
	}
	if leader < 0 {
		t.Fatal("no leader")
	}
	everywhere := func(id string) {
		t.Helper()
		for i, s := range stores {
			deadline := time.Now().Add(5 * time.Second)
			for {
				if _, ok := s.State().Job(id); ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s never reached n%d", id, i)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	if _, err := stores[leader].Apply(context.Background(), submit("q1")); err != nil {
		t.Fatal(err)
	}
	everywhere("q1")
	before := stores[leader].transport.quiet.answered.Load()
	time.Sleep(300 * time.Millisecond) // idle: the replication loop repeats itself
	if stores[leader].transport.quiet.answered.Load() == before {
		t.Fatal("the idle leader sent every repeated empty append")
	}
	if _, err := stores[leader].Apply(context.Background(), submit("q2")); err != nil {
		t.Fatal(err)
	}
	everywhere("q2")

	// Restart a follower on its data dir while the cluster is idle: it
	// must learn the commit index (and so apply q3) without a new write.
	f := (leader + 1) % 3
	if _, err := stores[leader].Apply(context.Background(), submit("q3")); err != nil {
		t.Fatal(err)
	}
	stores[f].Close()
	stores[f] = nil
	var l tcpLayer
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ln, err := net.Listen("tcp", layers[f].Addr().String())
		if err == nil {
			l = tcpLayer{ln}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebind %s: %v", layers[f].Addr(), err)
		}
	}
	stores[f] = open(f, l)
	everywhere("q3")
}
