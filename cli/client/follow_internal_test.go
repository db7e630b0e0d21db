package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/quic-go/quic-go"
)

// The dial order: the node that answered last, the given addresses, then
// those learned from the cluster; a node whose stream broke (or went
// silent) last, so a reconnect tries the others at once.
func TestDialOrderLearnedAndAvoided(t *testing.T) {
	c, err := NewCluster([]string{"10.0.0.1:7444", "10.0.0.2:7444"}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.learn([]string{"10.0.0.2:7444", "10.0.0.3:7444", "nonsense", "10.0.0.3:7444"})
	if got, want := c.order(), []string{"10.0.0.1:7444", "10.0.0.2:7444", "10.0.0.3:7444"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	c.answered = "10.0.0.2:7444"
	if got, want := c.order(), []string{"10.0.0.2:7444", "10.0.0.1:7444", "10.0.0.3:7444"}; !slices.Equal(got, want) {
		t.Fatalf("order after 10.0.0.2 answered %v, want %v", got, want)
	}
	f := c.Follow("j-1")
	defer f.Close()
	var notes []Notice
	c.Notify = func(n Notice) { notes = append(notes, n) }
	if !f.Broke(context.Background(), errors.New("stream reset")) {
		t.Fatal("Broke gave up with a live context")
	}
	if got, want := c.order(), []string{"10.0.0.1:7444", "10.0.0.3:7444", "10.0.0.2:7444"}; !slices.Equal(got, want) {
		t.Fatalf("order after its stream broke %v, want %v", got, want)
	}
	c.answered = "10.0.0.3:7444"
	f.Delivered()
	if len(notes) != 2 || notes[0].Through != "" || notes[0].Lost != "10.0.0.2:7444" || notes[1].Through != "10.0.0.3:7444" || notes[1].What != "j-1" {
		t.Fatalf("notices %+v", notes)
	}
	f.Delivered() // no news: no notice
	if len(notes) != 2 {
		t.Fatalf("notices %+v", notes)
	}
}

// A broken stream is opened again at once, then after pauses that grow
// but never exceed a second (a node merely restarting is used again
// within a second of serving); a cancelled wait stops at once.
func TestReconnectPausesStayShort(t *testing.T) {
	if reconnectPauses[0] != 0 || slices.Max(reconnectPauses) > time.Second || !slices.IsSorted(reconnectPauses) {
		t.Fatalf("reconnect pauses %v", reconnectPauses)
	}
	c, err := NewCluster([]string{"10.0.0.1:7444"}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := c.Follow("j-1")
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	if !f.Broke(ctx, errors.New("gone")) {
		t.Fatal("first reconnect refused")
	}
	cancel()
	if f.Broke(ctx, errors.New("gone")) {
		t.Fatal("a cancelled wait reconnects")
	}
}

// A call an older node does not have (a rolling upgrade under way) is
// explained as such, naming what to do, not as a bare "unimplemented".
func TestExplainUnimplementedNamesOlderSoftware(t *testing.T) {
	c := &Client{}
	e := c.Explain(connect.NewError(connect.CodeUnimplemented, errors.New("palyra.v1.KVService/PutKV is not implemented")))
	if e.Code != "unimplemented" || !strings.Contains(e.Message, "older software") || !strings.Contains(e.Hint, "upgrade that node") {
		t.Fatalf("explained as %+v", e)
	}
}

// A connection that was up and then heard nothing (a node killed
// mid-call) leaves the call's outcome unknown, so a keyed submission is
// sent again; a handshake that timed out reached no node.
func TestIdleMidCallIsAnUnknownOutcome(t *testing.T) {
	c := &Client{Addr: "127.0.0.1:1", Addrs: []string{"127.0.0.1:1"}}
	idle := fmt.Errorf("post: %w", &quic.IdleTimeoutError{})
	if e := c.transportError("127.0.0.1:1", idle); e.Code != "unreachable" {
		t.Fatalf("idle before any handshake completed (a pairing client, which dials on its own): %+v", e)
	}
	c.answered = "127.0.0.1:1" // the dial completed a handshake
	e := c.transportError("127.0.0.1:1", idle)
	if e.Code != "unavailable" || !OutcomeUnknown(e.Code) || !strings.Contains(e.Message, "may or may not have taken effect") {
		t.Fatalf("idle mid-call: %+v", e)
	}
	if e := c.transportError("127.0.0.1:1", &quic.HandshakeTimeoutError{}); e.Code != "unreachable" || OutcomeUnknown(e.Code) {
		t.Fatalf("handshake timeout: %+v", e)
	}
}
