package consensus

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A peer's clean stop ends raft's connections mid-read; the errors that
// causes are not errors. Anything else still is.
func TestExpectedRaftErrors(t *testing.T) {
	for msg, want := range map[string]bool{
		`failed to decode incoming command: error="EOF"`:                                                  true,
		`failed to decode incoming command: error="read: use of closed network connection"`:               true,
		`failed to decode incoming command: error="Application error 0x100 (remote): node shutting down"`: true,
		`failed to decode incoming command: error="unknown rpc type 9"`:                                   false,
		`failed to append entries: error="EOF"`:                                                           false,
	} {
		if got := expectedRaftError(msg); got != want {
			t.Errorf("%s: %v, want %v", msg, got, want)
		}
	}
}

// A follower catching up (a join, a restart) makes raft warn "failed to
// get previous log" until the leader has walked back: logged at debug;
// other warnings stay warnings.
func TestCatchingUpIsNotAWarning(t *testing.T) {
	var buf bytes.Buffer
	w := &slogWriter{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	w.Write([]byte("[WARN]  raft: failed to get previous log: previous-index=12 last-index=0 error=\"log not found\"\n"))
	w.Write([]byte("[WARN]  raft: heartbeat timeout reached, starting election\n"))
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="failed to get previous log`) {
		t.Errorf("catching up not at debug:\n%s", out)
	}
	if !strings.Contains(out, `level=WARN msg="heartbeat timeout reached`) {
		t.Errorf("another warning lost its level:\n%s", out)
	}
}
