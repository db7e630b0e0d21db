package cluster

import (
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// promoter keeps exactly target voters among healthy servers, where there
// are enough of them. autopilot's default StablePromoter would make every
// server a voter, which slows every commit as the cluster grows.
//
// Rules, in order:
//   - the leader always votes; healthy voters keep their vote, up to target
//     (any beyond target are demoted, least stable first);
//   - a voter that is unhealthy ("limping": gossip says dead, or it has
//     trailed the leader for longer than the stabilization time) keeps its
//     seat until a healthy, stable non-voter can take it, so a leader that
//     cannot yet see its peers never strips them;
//   - free seats are filled with healthy, stable non-voters, but never up to
//     an even number of voters (an even count tolerates no more failures
//     than the odd count below it and needs a larger quorum).
type promoter struct {
	target int
	now    func() time.Time // nil means time.Now
}

var _ autopilot.Promoter = (*promoter)(nil)

func (p *promoter) GetServerExt(*autopilot.Config, *autopilot.ServerState) any { return nil }
func (p *promoter) GetStateExt(*autopilot.Config, *autopilot.State) any        { return nil }

// GetNodeTypes marks every server a potential voter: any node may vote.
func (p *promoter) GetNodeTypes(_ *autopilot.Config, s *autopilot.State) map[raft.ServerID]autopilot.NodeType {
	out := make(map[raft.ServerID]autopilot.NodeType, len(s.Servers))
	for id := range s.Servers {
		out[id] = autopilot.NodeVoter
	}
	return out
}

func (p *promoter) IsPotentialVoter(t autopilot.NodeType) bool { return t == autopilot.NodeVoter }

// FilterFailedServerRemovals allows every removal: the grace period is
// applied in RemoveFailedServer, and autopilot itself never removes more
// voters than a majority can spare.
func (p *promoter) FilterFailedServerRemovals(_ *autopilot.Config, _ *autopilot.State, f *autopilot.FailedServers) *autopilot.FailedServers {
	return f
}

func (p *promoter) CalculatePromotionsAndDemotions(c *autopilot.Config, s *autopilot.State) autopilot.RaftChanges {
	now := time.Now()
	if p.now != nil {
		now = p.now()
	}
	stable := s.ServerStabilizationTime(c)
	var good, limping, candidates []*autopilot.ServerState
	for _, srv := range s.Servers {
		switch {
		case srv.State == autopilot.RaftLeader:
			good = append(good, srv)
		case srv.HasVotingRights():
			// Alive but briefly unhealthy (a slow stats call, a GC pause)
			// is not a reason to hand the seat away.
			briefly := srv.Server.NodeStatus == autopilot.NodeAlive && now.Sub(srv.Health.StableSince) < c.ServerStabilizationTime
			if srv.Health.Healthy || briefly {
				good = append(good, srv)
			} else {
				limping = append(limping, srv)
			}
		case srv.Server.NodeStatus == autopilot.NodeAlive && srv.Health.IsStable(now, stable):
			candidates = append(candidates, srv)
		}
	}
	byPreference(good)
	byPreference(candidates)
	slices.SortFunc(limping, func(a, b *autopilot.ServerState) int { // worst first
		if fa, fb := a.Server.NodeStatus != autopilot.NodeAlive, b.Server.NodeStatus != autopilot.NodeAlive; fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a.Server.ID), string(b.Server.ID))
	})

	var ch autopilot.RaftChanges
	if len(good) > p.target {
		for _, srv := range good[p.target:] {
			ch.Demotions = append(ch.Demotions, srv.Server.ID)
		}
		good = good[:p.target]
	}
	slots := p.target - len(good)
	kept := limping[:min(len(limping), slots)]
	for _, srv := range limping[len(kept):] {
		ch.Demotions = append(ch.Demotions, srv.Server.ID)
	}
	// Healthy non-voters first replace limping voters, one for one...
	r := min(len(candidates), len(kept))
	for i := 0; i < r; i++ {
		ch.Promotions = append(ch.Promotions, candidates[i].Server.ID)
		ch.Demotions = append(ch.Demotions, kept[i].Server.ID)
	}
	// ...then fill free seats, stopping at an odd number of voters.
	free := slots - len(kept)
	f := min(len(candidates)-r, free)
	if (len(good)+len(kept)+f)%2 == 0 && f > 0 {
		f--
	}
	for _, srv := range candidates[r : r+f] {
		ch.Promotions = append(ch.Promotions, srv.Server.ID)
	}
	return ch
}

// byPreference orders servers best first: the leader, then voters, then
// those healthy the longest, then by id (autopilot's own ordering, made
// total).
func byPreference(ss []*autopilot.ServerState) {
	slices.SortFunc(ss, func(a, b *autopilot.ServerState) int {
		rank := func(s *autopilot.ServerState) int {
			switch s.State {
			case autopilot.RaftLeader:
				return 0
			case autopilot.RaftVoter:
				return 1
			}
			return 2
		}
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		if c := a.Health.StableSince.Compare(b.Health.StableSince); c != 0 {
			return c
		}
		return strings.Compare(string(a.Server.ID), string(b.Server.ID))
	})
}
