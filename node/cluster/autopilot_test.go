package cluster

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// A live server is lagging (no new work, a warning) only once it has been
// unhealthy for unhealthyWarnAfter while alive: autopilot's own clock
// counts a node's time dead as unhealthy, so a restarted node was marked
// at once while it caught up.
func TestLaggingCountsOnlyTimeAlive(t *testing.T) {
	c := &Cluster{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := &apDelegate{c: c}
	c.apd = d
	t0 := time.Unix(1_000_000, 0)
	state := func(status autopilot.NodeStatus, healthy bool, stableSince time.Time) *autopilot.State {
		return &autopilot.State{Leader: "l", Servers: map[raft.ServerID]*autopilot.ServerState{
			"l": {Server: autopilot.Server{ID: "l", NodeStatus: autopilot.NodeAlive}, Health: autopilot.ServerHealth{Healthy: true}},
			"n": {Server: autopilot.Server{ID: "n", NodeStatus: status}, Health: autopilot.ServerHealth{Healthy: healthy, StableSince: stableSince}},
		}}
	}
	step := func(at time.Duration, s *autopilot.State, want bool) {
		t.Helper()
		d.logServerHealth(s, t0.Add(at))
		if got := c.LaggingServers()["n"]; got != want {
			t.Fatalf("at %s: lagging %v, want %v", at, got, want)
		}
	}
	// Dead for a minute (unhealthy all along, by autopilot's clock).
	step(0, state(autopilot.NodeFailed, false, t0), false)
	step(60*time.Second, state(autopilot.NodeFailed, false, t0), false)
	// Restarted: alive, still catching up. Not lagging yet.
	step(61*time.Second, state(autopilot.NodeAlive, false, t0), false)
	step(61*time.Second+unhealthyWarnAfter-time.Second, state(autopilot.NodeAlive, false, t0), false)
	// Still behind a full unhealthyWarnAfter after coming back: lagging.
	step(61*time.Second+unhealthyWarnAfter, state(autopilot.NodeAlive, false, t0), true)
	// Healthy again: not lagging; unhealthy again: the clock starts over.
	step(80*time.Second, state(autopilot.NodeAlive, true, t0), false)
	step(81*time.Second, state(autopilot.NodeAlive, false, t0), false)
	step(81*time.Second+unhealthyWarnAfter, state(autopilot.NodeAlive, false, t0), true)
	// Down: gossip's to report; not "lagging".
	step(100*time.Second, state(autopilot.NodeFailed, false, t0), false)
}
