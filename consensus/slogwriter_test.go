package consensus

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
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

// Once the store is closing, the errors raft's own shutdown causes are
// debug; the same errors before Close, and other errors during it, stay
// errors.
func TestShutdownErrorsAreNotErrorsWhileClosing(t *testing.T) {
	var buf bytes.Buffer
	closing := new(atomic.Bool)
	w := &slogWriter{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), closing: closing}
	line := []byte("[ERROR] raft: failed to heartbeat to: peer=127.0.0.1:1 backoff time=10ms error=\"transport shutdown\"\n")
	w.Write(line)
	closing.Store(true)
	w.Write(line)
	w.Write([]byte("[ERROR] raft: failed to take snapshot: error=\"disk full\"\n"))
	out := buf.String()
	if n := strings.Count(out, "level=ERROR msg=\"failed to heartbeat"); n != 1 {
		t.Errorf("the shutdown error before Close should be the one ERROR, got %d:\n%s", n, out)
	}
	if !strings.Contains(out, "level=DEBUG msg=\"failed to heartbeat") {
		t.Errorf("the shutdown error while closing is not debug:\n%s", out)
	}
	if !strings.Contains(out, "level=ERROR msg=\"failed to take snapshot") {
		t.Errorf("another error while closing lost its level:\n%s", out)
	}
}

// A removed node's raft RPCs fail because peers refuse its certificate:
// debug (the node says so itself, at most every five minutes), where they
// were an error every half second. Other RPC failures stay errors.
func TestRefusedCertificateRPCsAreNotErrors(t *testing.T) {
	var buf bytes.Buffer
	w := &slogWriter{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	w.Write([]byte(`[ERROR] raft: failed to make requestVote RPC: target="{Voter n-1 127.0.0.1:1}" error="CRYPTO_ERROR 0x12a (remote): tls: bad certificate" term=7` + "\n"))
	w.Write([]byte(`[ERROR] raft: failed to make requestVote RPC: target="{Voter n-1 127.0.0.1:1}" error="dial: timeout" term=7` + "\n"))
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="failed to make requestVote RPC: target=\"{Voter n-1 127.0.0.1:1}\" error=\"CRYPTO_ERROR 0x12a (remote): tls: bad certificate`) {
		t.Errorf("a refused certificate's RPC failure not at debug:\n%s", out)
	}
	if !strings.Contains(out, `level=ERROR msg="failed to make requestVote RPC: target=\"{Voter n-1 127.0.0.1:1}\" error=\"dial: timeout`) {
		t.Errorf("another RPC failure lost its level:\n%s", out)
	}
}

// While the cluster refuses this node (it was removed), raft's warnings
// and errors (its elections that cannot win, every half second) are
// debug; before and after, they keep their level.
func TestRaftIsQuietWhileRefused(t *testing.T) {
	var buf bytes.Buffer
	refused := new(atomic.Bool)
	w := &slogWriter{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), refused: refused}
	w.Write([]byte("[WARN]  raft: Election timeout reached, restarting election\n"))
	refused.Store(true)
	w.Write([]byte("[WARN]  raft: Election timeout reached, restarting election\n"))
	out := buf.String()
	if strings.Count(out, "level=WARN") != 1 || strings.Count(out, "level=DEBUG") != 1 {
		t.Fatalf("want one warning before and one debug line while refused:\n%s", out)
	}
}
