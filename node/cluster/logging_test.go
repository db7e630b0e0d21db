package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// capture records slog records.
type capture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func TestLogAdaptersKeepLevelsAndArgs(t *testing.T) {
	h := &capture{}
	l := slog.New(h)
	newStdLogger(l).Printf("[WARN] memberlist: Refuting a suspect message (from: %s)", "n-1")
	newStdLogger(l).Printf("[ERR] memberlist: Push/Pull failed")
	hc := newHCLogger(l, "autopilot").Named("x")
	hc.Info("Promoting server", "id", "n-2")
	hc.Debug("quiet")

	want := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelWarn, "Refuting a suspect message (from: n-1)"},
		{slog.LevelError, "Push/Pull failed"},
		{slog.LevelInfo, "Promoting server"},
		{slog.LevelDebug, "quiet"},
	}
	if len(h.recs) != len(want) {
		t.Fatalf("got %d records, want %d", len(h.recs), len(want))
	}
	for i, w := range want {
		if r := h.recs[i]; r.Level != w.level || r.Message != w.msg {
			t.Errorf("record %d: %v %q, want %v %q", i, r.Level, r.Message, w.level, w.msg)
		}
	}
	var id string
	h.recs[2].Attrs(func(a slog.Attr) bool {
		if a.Key == "id" {
			id = a.Value.String()
		}
		return true
	})
	if id != "n-2" {
		t.Fatalf("hclog args did not become slog attributes: id=%q", id)
	}
	if hc.GetLevel() != hclog.Trace || !hc.IsDebug() {
		t.Fatal("hclog level must follow the slog handler")
	}
}

// Gossip errors a healthy cluster meets (probes of a stopping peer) are
// warnings; other errors stay errors.
func TestExpectedGossipErrorsAreWarnings(t *testing.T) {
	var buf bytes.Buffer
	l := newStdLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	l.Print("[ERR] memberlist: Failed fallback TCP ping: timeout 1s: read: EOF")
	l.Print("[ERR] memberlist: something else broke")
	out := buf.String()
	if !strings.Contains(out, `level=WARN msg="Failed fallback TCP ping`) || !strings.Contains(out, `level=ERROR msg="something else broke`) {
		t.Fatalf("levels:\n%s", out)
	}
}

// memberlist's words about TCP and UDP are put in this transport's: QUIC
// datagrams and a stream on one UDP port.
func TestMemberlistTransportWording(t *testing.T) {
	h := &capture{}
	newStdLogger(slog.New(h)).Printf("[WARN] memberlist: Was able to connect to n-1 over TCP but UDP probes failed, network may be misconfigured")
	if len(h.recs) != 1 || strings.Contains(h.recs[0].Message, "TCP") || !strings.HasPrefix(h.recs[0].Message, "Was able to connect to n-1 over a stream") {
		t.Fatalf("records: %+v", h.recs)
	}
}
