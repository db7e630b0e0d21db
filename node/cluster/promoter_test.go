package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// srv describes one server for a promoter case: role is "leader", "voter"
// or "non-voter"; health is "ok", "dead" (gossip failed), "lagging" (alive
// but unhealthy for long) or "blip" (alive, unhealthy for a moment).
type srv struct{ id, role, health string }

func promoterState(now time.Time, servers []srv) *autopilot.State {
	s := &autopilot.State{Servers: map[raft.ServerID]*autopilot.ServerState{}}
	for _, x := range servers {
		st := &autopilot.ServerState{Server: autopilot.Server{ID: raft.ServerID(x.id), NodeStatus: autopilot.NodeAlive}}
		switch x.role {
		case "leader":
			st.State = autopilot.RaftLeader
			s.Leader = st.Server.ID
		case "voter":
			st.State = autopilot.RaftVoter
		default:
			st.State = autopilot.RaftNonVoter
		}
		st.Health = autopilot.ServerHealth{Healthy: true, StableSince: now.Add(-time.Hour)}
		switch x.health {
		case "dead":
			st.Server.NodeStatus = autopilot.NodeFailed
			st.Health = autopilot.ServerHealth{Healthy: false, StableSince: now.Add(-time.Second)}
		case "lagging":
			st.Health = autopilot.ServerHealth{Healthy: false, StableSince: now.Add(-time.Hour)}
		case "blip":
			st.Health = autopilot.ServerHealth{Healthy: false, StableSince: now.Add(-time.Millisecond)}
		case "new":
			st.Health = autopilot.ServerHealth{Healthy: true, StableSince: now.Add(-time.Millisecond)}
		}
		s.Servers[st.Server.ID] = st
	}
	return s
}

func ids(v []raft.ServerID) []string {
	out := make([]string, len(v))
	for i, id := range v {
		out[i] = string(id)
	}
	slices.Sort(out)
	return out
}

func TestPromoterKeepsTargetVoters(t *testing.T) {
	cases := []struct {
		name            string
		target          int
		servers         []srv
		promote, demote []string
	}{
		{"a lone leader waits for a second spare rather than run two voters", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "non-voter", "ok"}}, nil, nil},
		{"two healthy spares make three voters", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "non-voter", "ok"}, {"c", "non-voter", "ok"}}, []string{"b", "c"}, nil},
		{"never more than the target", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "non-voter", "ok"}, {"c", "non-voter", "ok"}, {"d", "non-voter", "ok"}}, []string{"b", "c"}, nil},
		{"a dead voter is replaced by a healthy spare", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "voter", "ok"}, {"c", "voter", "dead"}, {"d", "non-voter", "ok"}}, []string{"d"}, []string{"c"}},
		{"a dead voter keeps its seat when no spare exists", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "voter", "ok"}, {"c", "voter", "dead"}}, nil, nil},
		{"a new leader that sees nobody yet strips nobody", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "voter", "dead"}, {"c", "voter", "dead"}, {"d", "non-voter", "dead"}}, nil, nil},
		{"a long-lagging voter is replaced", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "voter", "ok"}, {"c", "voter", "lagging"}, {"d", "non-voter", "ok"}}, []string{"d"}, []string{"c"}},
		{"a voter's brief blip is no reason to replace it", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "voter", "ok"}, {"c", "voter", "blip"}, {"d", "non-voter", "ok"}}, nil, nil},
		{"a spare that only just became healthy waits", 3,
			[]srv{{"a", "leader", "ok"}, {"b", "voter", "ok"}, {"c", "voter", "dead"}, {"d", "non-voter", "new"}}, nil, nil},
		{"too many voters are demoted, never the leader", 3,
			[]srv{{"a", "voter", "ok"}, {"b", "voter", "ok"}, {"c", "leader", "ok"}, {"d", "voter", "ok"}, {"e", "voter", "ok"}}, nil, []string{"d", "e"}},
		{"target 5 with four healthy servers stops at three", 5,
			[]srv{{"a", "leader", "ok"}, {"b", "non-voter", "ok"}, {"c", "non-voter", "ok"}, {"d", "non-voter", "ok"}}, []string{"b", "c"}, nil},
		{"target 1 keeps only the leader", 1,
			[]srv{{"a", "leader", "ok"}, {"b", "voter", "ok"}, {"c", "non-voter", "ok"}}, nil, []string{"b"}},
	}
	now := time.Now()
	conf := &autopilot.Config{ServerStabilizationTime: 10 * time.Second}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &promoter{target: tc.target, now: func() time.Time { return now }}
			ch := p.CalculatePromotionsAndDemotions(conf, promoterState(now, tc.servers))
			if got := ids(ch.Promotions); !slices.Equal(got, ids(toIDs(tc.promote))) {
				t.Errorf("promotions %v, want %v", got, tc.promote)
			}
			if got := ids(ch.Demotions); !slices.Equal(got, ids(toIDs(tc.demote))) {
				t.Errorf("demotions %v, want %v", got, tc.demote)
			}
			if ch.Leader != "" {
				t.Errorf("leadership transfer to %s; the promoter must never move the leader", ch.Leader)
			}
		})
	}
}

func toIDs(s []string) []raft.ServerID {
	out := make([]raft.ServerID, len(s))
	for i, x := range s {
		out[i] = raft.ServerID(x)
	}
	return out
}
