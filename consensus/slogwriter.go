package consensus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
)

// slogWriter turns hclog's formatted lines back into slog records.
// closing, when set, marks the store as shutting down: raft errors that
// its own shutdown causes are then expected (shuttingDownError).
type slogWriter struct {
	l       *slog.Logger
	closing *atomic.Bool
	refused *atomic.Bool // the cluster refuses this node: raft's complaints are debug
}

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
		if level == slog.LevelError && (expectedRaftError(s) || refusedByPeer(s) || w.closing != nil && w.closing.Load() && shuttingDownError(s)) ||
			level == slog.LevelWarn && catchingUp(s) ||
			level >= slog.LevelWarn && w.refused != nil && w.refused.Load() {
			level = slog.LevelDebug
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
