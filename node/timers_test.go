package node_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/node"
)

func TestTimersFor(t *testing.T) {
	lan, err := node.TimersFor("")
	if err != nil || lan.Network != node.NetworkLAN {
		t.Fatalf("default: %+v %v", lan, err)
	}
	wan, err := node.TimersFor(node.NetworkWAN)
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range []node.Timers{lan, wan} {
		// raft refuses a leader lease longer than the heartbeat timeout.
		if tm.RaftLeaderLease > tm.RaftHeartbeat || tm.Gossip.ProbeTimeout > tm.Gossip.ProbeInterval {
			t.Errorf("%s timers are inconsistent: %s", tm.Network, tm)
		}
	}
	if wan.RaftHeartbeat <= lan.RaftHeartbeat || wan.Gossip.ProbeInterval <= lan.Gossip.ProbeInterval || wan.DeadWorkerGrace <= lan.DeadWorkerGrace {
		t.Errorf("wan timers are not slower than lan's:\n%s\n%s", wan, lan)
	}
	if _, err := node.TimersFor("moon"); err == nil || !strings.Contains(err.Error(), "lan") || !strings.Contains(err.Error(), "wan") {
		t.Fatalf("unknown network: %v", err)
	}
}

// The network a node was started with is recorded, as is its address, so
// a plain restart keeps both.
func TestNetworkIsRecorded(t *testing.T) {
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir, Listen: "127.0.0.1:0", Network: node.NetworkWAN, BrowserSlots: -1, WasmSlots: 1,
		WasmCacheDir: sharedWasmCache, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := n.Addr()
	n.Close()
	cfg.Network, cfg.Listen = "", ""
	n, err = node.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Addr() != addr {
		t.Fatalf("restarted without Listen on %s, want its recorded %s", n.Addr(), addr)
	}
	if got := n.Timers().Network; got != node.NetworkWAN {
		t.Fatalf("restarted without --network: timers for %q, want wan", got)
	}
	if st, err := n.Layout().ReadState(); err != nil || st.Network != node.NetworkWAN {
		t.Fatalf("node.json: %+v %v", st, err)
	}
}
