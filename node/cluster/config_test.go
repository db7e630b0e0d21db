package cluster

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/proto/peerpb"
)

func TestMetaRoundTripAndSizeLimit(t *testing.T) {
	m := Meta{Labels: map[string]string{"zone": "a", "gpu": "no"}, Capacity: map[string]int{"wasm": 8, "browser": 2}, Version: "0.1.0"}
	b, err := encodeMeta(m, farewell{leaving: true, stopping: true})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := encodeMeta(m, farewell{leaving: true, stopping: true})
	if !bytes.Equal(b, again) {
		t.Fatal("the same meta encoded to different bytes; gossip would see spurious updates")
	}
	got, f, err := decodeMeta(b)
	if err != nil || !f.leaving || !f.stopping || got.Labels["gpu"] != "no" || got.Capacity["browser"] != 2 || got.Version != "0.1.0" {
		t.Fatalf("decoded %+v %+v err=%v, want the original back", got, f, err)
	}

	big := Meta{Labels: map[string]string{"notes": strings.Repeat("x", MaxMetaSize)}}
	if _, err := encodeMeta(big, farewell{}); err == nil || !strings.Contains(err.Error(), "fewer or shorter labels") {
		t.Fatalf("oversized meta: got %v, want an error naming the fix", err)
	}
	n := newNode(t, 3)
	n.start(true)
	if _, err := New(Config{NodeID: n.id, Transport: n.tr, Store: n.store, Meta: big}); err == nil {
		t.Fatal("New accepted meta larger than gossip allows")
	}
	if err := n.cl.SetMeta(ctxFor(t, 5*time.Second), big); err == nil {
		t.Fatal("SetMeta accepted meta larger than gossip allows")
	}
	if err := n.cl.SetMeta(ctxFor(t, 5*time.Second), Meta{Capacity: map[string]int{"wasm": 3}}); err != nil {
		t.Fatal(err)
	}
	if m := viewOf(n).byID[n.id]; m.Capacity["wasm"] != 3 {
		t.Fatalf("own member after SetMeta: %+v", m)
	}
}

func TestConfigErrorsNameTheFix(t *testing.T) {
	n := newNode(t, 3)
	n.start(true)
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no transport", Config{NodeID: n.id, Store: n.store}, "Transport and Config.Store are required"},
		{"bad id", Config{NodeID: "node one", Transport: n.tr, Store: n.store}, "not a node id"},
		{"even voters", Config{NodeID: n.id, Transport: n.tr, Store: n.store, TargetVoters: 4}, "use 1, 3 or 5"},
		{"other address", Config{NodeID: n.id, Transport: n.tr, Store: n.store, Advertise: "10.0.0.9:7444"}, "set mesh.Config.AdvertiseAddr"},
		{"timeout beyond interval", Config{NodeID: n.id, Transport: n.tr, Store: n.store,
			Tuning: Tuning{ProbeInterval: time.Second, ProbeTimeout: 2 * time.Second}}, "must fit inside the interval"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	c, err := New(Config{NodeID: n.id, Transport: n.tr, Store: n.store})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.TargetVoters != DefaultTargetVoters || c.cfg.Tuning != LANTuning() {
		t.Fatalf("defaults: %d voters, tuning %+v; want 3 and LANTuning", c.cfg.TargetVoters, c.cfg.Tuning)
	}
	if err := c.Join(ctxFor(t, time.Second), []string{"127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "Start") {
		t.Fatalf("Join before Start: got %v, want an error saying to call Start", err)
	}
	if err := n.cl.Join(ctxFor(t, time.Second), []string{"127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "bootstrapped") {
		t.Fatalf("Join on a bootstrapped node: got %v, want a refusal explaining why", err)
	}
}

func TestFrameLimits(t *testing.T) {
	var buf bytes.Buffer
	req := &peerpb.Request{Body: &peerpb.Request_Leave{Leave: &peerpb.LeaveRequest{Id: "n-01020304"}}}
	if err := writeFrame(&buf, req); err != nil {
		t.Fatal(err)
	}
	var got peerpb.Request
	if err := readFrame(&buf, &got); err != nil || got.GetLeave().GetId() != "n-01020304" {
		t.Fatalf("round trip: %v %v", &got, err)
	}
	huge := bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff})
	if err := readFrame(huge, &got); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a 4 GiB frame header: got %v, want a size-limit error", err)
	}
	if err := readFrame(bytes.NewReader([]byte{0, 0, 0, 9, 1}), &got); err == nil {
		t.Fatal("a truncated frame decoded")
	}
}
