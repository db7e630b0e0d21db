package consensus

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// slogWriter turns hclog's formatted lines back into slog records.
// closing, when set, marks the store as shutting down: raft errors that
// its own shutdown causes are then expected (shuttingDownError).
type slogWriter struct {
	l       *slog.Logger
	closing *atomic.Bool
	refused *atomic.Bool // the cluster refuses this node: raft's lines are debug (see Write)

	// unreachable is, per peer address, when raft's last error about
	// reaching it was logged as an error, and how many have been debug
	// since (see peerUnreachable).
	mu          sync.Mutex
	unreachable map[string]*peerErrors
	now         func() time.Time // nil: time.Now
}

// peerErrors counts a peer's replication errors between two logged ones.
type peerErrors struct {
	logged time.Time
	quiet  int
}

// unreachableEvery is how often raft's errors about one unreachable peer
// are logged as errors: a peer that is down for good (a dead worker still
// in the raft configuration) had the leader log one every few seconds
// for as long as nobody removed it.
const unreachableEvery = 5 * time.Minute

func (w *slogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" {
			continue
		}
		level := slog.LevelInfo
		for tag, lv := range map[string]slog.Level{"[TRACE]": slog.LevelDebug - 4, "[DEBUG]": slog.LevelDebug,
			"[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERROR]": slog.LevelError} {
			if strings.HasPrefix(s, tag) {
				level = lv
				s = strings.TrimSpace(strings.TrimPrefix(s, tag))
				break
			}
		}
		s = strings.TrimPrefix(s, "raft: ")
		// While the cluster refuses this node (it was removed), every raft
		// line is debug, its info too: raft campaigns for ever ("entering
		// candidate state", "pre-vote campaign failed", about two lines a
		// second) and nothing it says helps. The node's own ERROR says what
		// happened and what to do (node watchSelfRefused).
		if level == slog.LevelError && (expectedRaftError(s) || refusedByPeer(s) || w.closing != nil && w.closing.Load() && shuttingDownError(s)) ||
			level == slog.LevelWarn && catchingUp(s) ||
			level > slog.LevelDebug && w.refused != nil && w.refused.Load() {
			level = slog.LevelDebug
		}
		if level == slog.LevelError {
			if addr, ok := peerUnreachable(s); ok {
				level, s = w.rateLimitPeer(addr, s)
			}
		}
		w.l.Log(context.Background(), level, s)
	}
	return len(p), nil
}

// expectedRaftError reports a raft transport error that every clean stop
// of a peer causes (its connections end mid-read): not an error.
func expectedRaftError(msg string) bool {
	return strings.Contains(msg, "failed to decode incoming command") &&
		(strings.Contains(msg, "EOF") || strings.Contains(msg, "closed") || strings.Contains(msg, "reset") ||
			strings.Contains(msg, "node shutting down")) // the QUIC close code our transport sends on a clean stop
}

// refusedByPeer reports a raft RPC that failed because the peer refused
// this node's certificate in the handshake: a node removed from the
// cluster and started again on its old data dir logged one every half
// second (its elections, its appends) and kept doing so. The node says
// what happened itself, once, and every five minutes while it lasts (node
// watchSelfRefused), so raft's lines are debug.
func refusedByPeer(msg string) bool {
	return strings.Contains(msg, "tls: bad certificate") || strings.Contains(msg, "tls: certificate required")
}

// catchingUp reports raft's warning that a follower lacks the entry the
// leader's append follows: what every joining or lagging follower says
// until the leader has walked back to where its log ends (the leader then
// sends what is missing). Normal, so not a warning.
func catchingUp(msg string) bool {
	return strings.HasPrefix(msg, "failed to get previous log")
}

// shuttingDownError reports a raft error that a store's own Close causes:
// RPCs in flight to peers fail as its transport and streams close.
func shuttingDownError(msg string) bool {
	for _, m := range []string{"transport shutdown", "stream canceled", "use of closed network connection", "raft is shutdown", "shutdown"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// peerUnreachable reports raft's errors about replicating to a peer (an
// append or a heartbeat that failed) and the peer's address.
func peerUnreachable(msg string) (addr string, ok bool) {
	if !strings.HasPrefix(msg, "failed to appendEntries to") && !strings.HasPrefix(msg, "failed to heartbeat to") {
		return "", false
	}
	_, v, ok := strings.Cut(msg, "peer=")
	if !ok {
		return "", false
	}
	// peer="{Voter n2 127.0.0.1:7445}" or peer=127.0.0.1:7445
	v = strings.TrimPrefix(v, `"`)
	if strings.HasPrefix(v, "{") {
		end := strings.IndexByte(v, '}')
		if end < 0 {
			return "", false
		}
		f := strings.Fields(v[1:end])
		if len(f) == 0 {
			return "", false
		}
		return f[len(f)-1], true
	}
	if end := strings.IndexAny(v, "\" \t"); end >= 0 {
		v = v[:end]
	}
	return v, v != ""
}

// rateLimitPeer logs one error about an unreachable peer per
// unreachableEvery, with how many were left out and what to do if the
// peer is gone for good; the others are debug.
func (w *slogWriter) rateLimitPeer(addr, msg string) (slog.Level, string) {
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unreachable == nil {
		w.unreachable = map[string]*peerErrors{}
	}
	pe := w.unreachable[addr]
	t := now()
	if pe != nil && t.Sub(pe.logged) < unreachableEvery {
		pe.quiet++
		return slog.LevelDebug, msg
	}
	if pe == nil {
		if len(w.unreachable) >= 1024 { // peers come and go: forget the oldest rather than grow
			w.unreachable = map[string]*peerErrors{}
		}
		pe = &peerErrors{}
		w.unreachable[addr] = pe
	}
	if pe.quiet > 0 {
		msg += fmt.Sprintf(" (%d more like it since %s, logged at debug)", pe.quiet, pe.logged.UTC().Format(time.TimeOnly))
	}
	msg += fmt.Sprintf("; raft keeps retrying %s: if that node is gone for good, remove it with 'palyra node remove' (errors about it are logged once per %s)", addr, unreachableEvery)
	pe.logged, pe.quiet = t, 0
	return slog.LevelError, msg
}
