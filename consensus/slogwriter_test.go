package consensus

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// While the cluster refuses this node (it was removed), raft's lines
// (its elections that cannot win, about two a second: warnings, errors
// and the campaign's info lines alike) are debug; before and after, they
// keep their level.
func TestRaftIsQuietWhileRefused(t *testing.T) {
	var buf bytes.Buffer
	refused := new(atomic.Bool)
	w := &slogWriter{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), refused: refused}
	campaign := "[WARN]  raft: Election timeout reached, restarting election\n" +
		"[INFO]  raft: entering candidate state: node=\"Node at 127.0.0.1:7446 [Candidate]\" term=12\n" +
		"[INFO]  raft: pre-vote campaign failed, waiting for election timeout: term=12 tally=1 votesNeeded=2\n"
	w.Write([]byte(campaign))
	refused.Store(true)
	for range 10 {
		w.Write([]byte(campaign))
	}
	refused.Store(false)
	w.Write([]byte(campaign))
	out := buf.String()
	if n := strings.Count(out, "level=WARN"); n != 2 {
		t.Errorf("want the warning before and after the refusal only, got %d:\n%s", n, out)
	}
	if n := strings.Count(out, "level=INFO"); n != 4 {
		t.Errorf("want the campaign's info lines before and after the refusal only, got %d:\n%s", n, out)
	}
	if n := strings.Count(out, "level=DEBUG"); n != 30 {
		t.Errorf("want the 30 lines while refused at debug, got %d:\n%s", n, out)
	}
}

// A peer that is down for good (a dead worker left in the raft
// configuration) had the leader log an error about it every few seconds
// for as long as nobody removed it: one error per peer per
// unreachableEvery, saying how many were left out and how to remove the
// node; the others are debug. Another peer's errors and other errors are
// not held back by it.
func TestUnreachablePeerErrorsAreRateLimited(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	w := &slogWriter{l: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), now: func() time.Time { return clock }}
	dead := []string{
		`[ERROR] raft: failed to appendEntries to: peer="{Nonvoter n-3 127.0.0.1:7446}" error="dial: timeout"`,
		`[ERROR] raft: failed to heartbeat to: peer=127.0.0.1:7446 backoff time=5s error="dial: timeout"`,
	}
	for i := 0; i < 30; i++ { // 5 s apart: two and a half minutes
		w.Write([]byte(dead[i%2] + "\n"))
		clock = clock.Add(5 * time.Second)
	}
	w.Write([]byte(`[ERROR] raft: failed to heartbeat to: peer=127.0.0.1:7445 backoff time=10ms error="dial: timeout"` + "\n"))
	w.Write([]byte(`[ERROR] raft: failed to take snapshot: error="disk full"` + "\n"))
	out := buf.String()
	if n := strings.Count(out, "level=ERROR"); n != 3 {
		t.Fatalf("want 3 errors (the dead peer once, another peer, the snapshot), got %d:\n%s", n, out)
	}
	if n := strings.Count(out, "level=DEBUG"); n != 29 {
		t.Fatalf("want the dead peer's 29 other lines at debug, got %d:\n%s", n, out)
	}
	if !strings.Contains(out, "palyra node remove") || !strings.Contains(out, "127.0.0.1:7446") {
		t.Fatalf("the error does not say how to remove a node gone for good:\n%s", out)
	}
	// Past the interval, the next error about it is logged again, with the
	// count of those left out.
	clock = clock.Add(unreachableEvery)
	buf.Reset()
	w.Write([]byte(dead[0] + "\n"))
	if out := buf.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "29 more like it") {
		t.Fatalf("after the interval: %s", out)
	}
}

func TestPeerUnreachableParsesRaftsLines(t *testing.T) {
	for msg, want := range map[string]string{
		`failed to appendEntries to: peer="{Voter n-2 10.0.0.2:7444}" error="x"`: "10.0.0.2:7444",
		`failed to heartbeat to: peer=10.0.0.3:7444 backoff time=10ms error="x"`: "10.0.0.3:7444",
		`failed to appendEntries to: peer="{}" error="x"`:                        "",
		`failed to take snapshot: error="x"`:                                     "",
	} {
		got, ok := peerUnreachable(msg)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", msg, got, ok, want)
		}
	}
}
