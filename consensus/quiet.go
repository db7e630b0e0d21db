package consensus

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Quiet replication. A leader's replication loop sends a follower an
// AppendEntries every 1–2 CommitTimeouts (1 ms here, so that a follower
// learns of a commit within milliseconds; DESIGN.md) even when there is
// nothing to send. On an idle cluster that was hundreds of empty round
// trips a second per follower (~330 at 2 ms), about a tenth of a core on
// the leader and a twentieth on each follower, for requests whose answer
// was already known.
//
// quietAppends answers such a repeat locally: a request with no entries,
// identical in term, previous entry and commit index to the last one the
// follower accepted, gets that answer again, but only while
//   - some request to the follower (a heartbeat, every HeartbeatTimeout/10)
//     succeeded within quietContact, so the contact time raft records from
//     the answer is at most that stale (the leader lease is 300 ms), and
//   - the last request actually sent with this content is younger than
//     quietResend, so a follower that restarted unnoticed in between
//     (and so lost the commit index it held in memory) learns it again
//     within that bound.
//
// Heartbeats, requests carrying entries, a changed commit index or term,
// and any request after a failure or a refusal go to the follower.
type quietAppends struct {
	mu       sync.Mutex
	peers    map[raft.ServerAddress]*quietPeer
	now      func() time.Time
	answered atomic.Uint64 // requests answered locally (tests read it)
}

const (
	quietContact = 100 * time.Millisecond
	quietResend  = 500 * time.Millisecond
)

type quietKey struct{ term, prevEntry, prevTerm, commit uint64 }

type quietPeer struct {
	lastOK   time.Time // any request answered, heartbeats included
	key      quietKey  // the last empty append the follower accepted
	resp     raft.AppendEntriesResponse
	sentAt   time.Time // when that append was actually sent
	accepted bool
}

func newQuietAppends(now func() time.Time) *quietAppends {
	return &quietAppends{peers: map[raft.ServerAddress]*quietPeer{}, now: now}
}

// isHeartbeat reports whether req is raft's heartbeat (the same test as
// raft's NetworkTransport: a term and nothing else).
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return req.Term != 0 && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

// answer fills resp and returns true when req can be answered without
// sending it.
func (q *quietAppends) answer(target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if len(req.Entries) != 0 || isHeartbeat(req) {
		return false
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.peers[target]
	if p == nil || !p.accepted || p.key != keyOf(req) ||
		now.Sub(p.lastOK) >= quietContact || now.Sub(p.sentAt) >= quietResend {
		return false
	}
	*resp = p.resp
	q.answered.Add(1)
	return true
}

// sent records the outcome of a request that went to the follower.
func (q *quietAppends) sent(target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil {
		// Everything goes out again until it answers; a peer that is gone
		// for good leaves nothing behind.
		delete(q.peers, target)
		return
	}
	p := q.peers[target]
	if p == nil {
		p = &quietPeer{}
		q.peers[target] = p
	}
	if resp.Term > req.Term {
		p.accepted = false
		return
	}
	p.lastOK = at
	if isHeartbeat(req) {
		return
	}
	if len(req.Entries) != 0 || !resp.Success {
		p.accepted = false
		return
	}
	p.key, p.resp, p.sentAt, p.accepted = keyOf(req), *resp, at, true
}

func keyOf(req *raft.AppendEntriesRequest) quietKey {
	return quietKey{req.Term, req.PrevLogEntry, req.PrevLogTerm, req.LeaderCommitIndex}
}
