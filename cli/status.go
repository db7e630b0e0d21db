package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func statusCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "status",
		Usage: "show the node's raft state and job counts",
		Description: `Shows the node at --addr: its raft role, term, commit and applied
   indexes, the leader it follows and since when (with how often the
   leader changed in the last hour, or since the node started if that is
   less, when more than once: frequent changes
   with no node lost mean busy machines or a lossy network, which 'palyra
   doctor' flags), who you are to it, and its version.

   voters: how many raft voters gossip reports alive, how many of them lag
   (their replica trails the leader's log: see the RAFT column of 'palyra
   nodes'), and how many more voters the cluster can lose and still commit.
   Writes and linearizable reads need a majority of voters. Below the
   number of voters the cluster keeps (--target-voters, 3 by default) it
   names that target and what restores it: a spare (an alive non-voter)
   is promoted by itself; without one, a node must be added.

   jobs: counts by phase in this node's replica. "running" counts the jobs
   placed on workers, including those waiting there for a free slot (a
   worker takes placements ahead of its slots), so it can exceed the
   cluster's slots. retention: how long ended jobs are kept.

   Exits 0 whenever the node answered, with or without a quorum: it reports.
   For a check that fails while the cluster cannot commit (no leader, no
   quorum, lagging voters), use 'palyra doctor' (exit 1 on a failed check).`,
		Flags: []ucli.Flag{jsonFlag},
		Action: func(c *ucli.Context) error {
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			resp, err := cl.Node.Status(c.Context, connect.NewRequest(&palyrav1.StatusRequest{}))
			if err != nil {
				return fail(c, cl.Explain(err))
			}
			s := resp.Msg
			if note := otherNodeNote(c, s.NodeId); note != "" {
				fmt.Fprintln(c.App.ErrWriter, note)
			}
			if e := removedView(c, s.NodeId); e != nil {
				fmt.Fprintf(c.App.ErrWriter, "warning: %s; %s\n", e.Message, e.Hint)
			}
			// The voters' health, from the member list (a caller who may not
			// list nodes goes without it).
			var health *voterHealth
			if nl, err := cl.Node.ListNodes(c.Context, connect.NewRequest(&palyrav1.ListNodesRequest{RaftProgress: true})); err == nil {
				h := votersHealth(nl.Msg.Nodes, int(nl.Msg.TargetVoters))
				health = &h
			}
			if c.Bool("json") {
				out := map[string]any{
					"node_id": s.NodeId, "address": s.Address, "leader_id": s.LeaderId,
					"leader_address": s.LeaderAddress, "term": s.Term, "commit_index": s.CommitIndex,
					"applied_index": s.AppliedIndex, "raft_state": s.RaftState, "jobs": s.JobsByPhase,
					"version": s.Version, "cluster_name": s.ClusterName, "ca_fingerprint": s.CaFingerprint,
					"caller": s.Caller, "uptime_ms": s.UptimeMs,
					"retention_ms": s.RetentionMs, "pruned_before": nullTime(s.PrunedBeforeMs),
					"leader_since": msTime(s.LeaderSinceMs), "leader_changes_last_hour": s.LeaderChangesLastHour,
				}
				if health != nil {
					down := health.down
					if down == nil {
						down = []string{}
					}
					lagging := health.lagging
					if lagging == nil {
						lagging = []string{}
					}
					voters := map[string]any{"total": health.total, "alive": health.alive,
						"failure_tolerance": health.tolerance(), "not_alive": down, "lagging": lagging}
					if health.target > 0 { // 0: a node older than the field
						voters["target"] = health.target
						voters["spares"] = health.spares
					}
					out["voters"] = voters
				}
				return writeJSON(c.App.Writer, out)
			}
			leader := s.LeaderId + " " + s.LeaderAddress + leaderTenure(s, time.Now())
			if s.LeaderId == "" {
				leader = "(none known: no quorum)"
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "node\t%s (%s)\ncluster\t%s\nraft\t%s, term %d, commit %d, applied %d\nleader\t%s\ncaller\t%s\nversion\t%s\n",
				s.NodeId, s.Address, s.ClusterName, s.RaftState, s.Term, s.CommitIndex, s.AppliedIndex,
				leader, s.Caller, s.Version)
			if health != nil {
				fmt.Fprintf(tw, "voters\t%s\n", health)
			}
			fmt.Fprint(tw, "jobs\t")
			for i, p := range []palyrav1.JobPhase{1, 2, 3, 4, 5, 6, 7, 8} {
				if i > 0 {
					fmt.Fprint(tw, ", ")
				}
				fmt.Fprintf(tw, "%s %d", p.WireName(), s.JobsByPhase[p.WireName()])
			}
			fmt.Fprintln(tw)
			fmt.Fprintf(tw, "retention\tended jobs kept %s%s\n", palyrav1.FormatRetention(s.RetentionMs), prunedNote(s.PrunedBeforeMs))
			return tw.Flush()
		},
	}
}

// voterHealth is how many raft voters the member list shows and how many
// of them are alive, with the ids of those that are not.
type voterHealth struct {
	// noLeader: the list carries raft progress and names no leader.
	noLeader     bool
	total, alive int
	down         []string // not alive: "id state"
	// lagging are alive voters trailing the leader's log (or not hearing
	// from it): "id what": they do not count towards the failure tolerance meanwhile.
	lagging []string
	// target is how many voters the cluster keeps (0: not known), and
	// spares the alive non-voters in raft that can be promoted to reach it.
	target, spares int
}

// votersHealth reads the voters' health off the member list; target is
// ListNodesResponse.target_voters.
func votersHealth(nodes []*palyrav1.NodeInfo, target int) voterHealth {
	h := voterHealth{target: target}
	// Without a leader every voter has lost touch with one: none lags
	// behind another (the serving node listed itself as lagging while
	// the quorum was gone).
	led := hasLeader(nodes)
	for _, n := range nodes {
		// A list with raft progress (some server answered) and no leader:
		// nothing can be committed, whatever gossip says is alive.
		h.noLeader = h.noLeader || (!led && n.RaftKnown)
		if !n.Voter {
			if n.InRaft && n.State == "alive" {
				h.spares++
			}
			continue
		}
		h.total++
		switch {
		case n.State != "alive":
			h.down = append(h.down, n.Id+" "+n.State)
		case led && n.RaftKnown && n.RaftLagging:
			h.alive++
			h.lagging = append(h.lagging, n.Id+" "+strings.TrimPrefix(raftText(n), "LAGGING: "))
		default:
			h.alive++
		}
	}
	return h
}

// tolerance is how many more voters can fail with a quorum left (-1: no
// quorum now).
func (h voterHealth) tolerance() int {
	if h.total == 0 {
		return 0
	}
	t := h.alive - len(h.lagging) - (h.total/2 + 1)
	if t < 0 || h.noLeader {
		return -1
	}
	return t
}

// belowTarget says, when the cluster has fewer voters than it keeps,
// what its target is and what restores it ("" otherwise): after a 'node
// leave' the voters left all look healthy, and nothing else says that
// one more failure now stops every write.
func (h voterHealth) belowTarget() string {
	if h.target == 0 || h.total >= h.target {
		return ""
	}
	// Autopilot promotes spares up to the target, to an odd number of
	// voters: missing is what it cannot fill.
	missing := h.target - h.total - h.spares
	switch {
	case missing <= 0:
		return fmt.Sprintf("target %d: a spare is promoted once it is stable", h.target)
	case missing == 1:
		return fmt.Sprintf("target %d: add a node to reach it", h.target)
	}
	return fmt.Sprintf("target %d: add %d nodes to reach it", h.target, missing)
}

func (h voterHealth) String() string {
	s := fmt.Sprintf("%d of %d alive", h.alive, h.total)
	if b := h.belowTarget(); b != "" {
		s += " (" + b + ")"
	}
	if len(h.lagging) > 0 {
		s += fmt.Sprintf(", %d lagging", len(h.lagging))
	}
	switch t := h.tolerance(); {
	case h.total == 0:
		return "none listed"
	case t < 0 && h.noLeader && h.alive-len(h.lagging) >= h.total/2+1:
		s += ": NO LEADER (an election is under way, or the voters cannot elect one: writes and linearizable reads fail until one is elected; see each voter's log)"
	case t < 0:
		s += ": NO QUORUM (writes and linearizable reads fail until a majority is back; if it is lost for good: 'palyra node recover --dry-run' on a stopped survivor)"
	case t == 0:
		s += ": can lose no voter without losing the quorum"
	case t == 1:
		s += ": can lose 1 more"
	default:
		s += fmt.Sprintf(": can lose %d more", t)
	}
	if len(h.down) > 0 {
		s += " (not alive: " + strings.Join(h.down, ", ") + ")"
	}
	if len(h.lagging) > 0 {
		s += " (lagging, not counted in the failure tolerance: " + strings.Join(h.lagging, ", ") + "; see 'palyra nodes')"
	}
	return s
}

// leaderTenure says since when the leader leads, as the node saw it, and
// how often the leader changed in the last hour when more than once (a
// node's first leader counts).
func leaderTenure(s *palyrav1.StatusResponse, now time.Time) string {
	if s.LeaderSinceMs == 0 { // none known, or a node older than the field
		return ""
	}
	since := time.UnixMilli(s.LeaderSinceMs)
	// The node knows when it learned of its leader: for the leader that is
	// when it took office; a follower (re)started since then learned later
	// (a trial: two nodes gave two "since" for one leader), and says so.
	seen := "since"
	if s.LeaderId != s.NodeId {
		seen = "followed by this node since"
	}
	out := fmt.Sprintf(", %s %s (%s ago)", seen, since.UTC().Format("15:04:05Z"), roughDuration(max(now.Sub(since), 0)))
	if s.LeaderChangesLastHour > 1 {
		out += fmt.Sprintf("; %d leader changes %s", s.LeaderChangesLastHour, changesWindow(s))
	}
	return out
}

// changesWindow is the span a node counted leader changes over: the last
// hour, or its time since it started when that is shorter (a trial saw
// "1 change in the last hour" from a node restarted after twenty).
func changesWindow(s *palyrav1.StatusResponse) string {
	if up := time.Duration(s.UptimeMs) * time.Millisecond; s.UptimeMs > 0 && up < time.Hour {
		return "in the " + roughDuration(up) + " since it started"
	}
	return "in the last hour"
}

// hasLeader reports whether a node list names a raft leader that has not
// left, stopped or died (a leader gossip briefly suspects still leads).
func hasLeader(nodes []*palyrav1.NodeInfo) bool {
	for _, n := range nodes {
		if n.Leader && n.State != "dead" && n.State != "stopped" && n.State != "left" && n.State != "removed" {
			return true
		}
	}
	return false
}

// otherNodeNote says when the node that answered is not this data dir's
// own (which did not answer: the CLI went on to another node it knows),
// "" otherwise or when --addr chose the node. status describes the node
// that answers, and the user asked about this machine's.
func otherNodeNote(c *ucli.Context, answered string) string {
	if c.IsSet("addr") || c.Bool("json") {
		return ""
	}
	l := node.Layout{Dir: c.String("data-dir")}
	st, err := l.ReadState()
	if err != nil || st.NodeID == "" || st.NodeID == answered {
		return ""
	}
	// Only when the command went through this data dir's credential: a
	// device credential (of this cluster or another) was never aimed at
	// this node.
	if src, err := resolveCredential(c); err != nil || src.device || filepath.Clean(src.dir) != filepath.Clean(l.OperatorDir()) {
		return ""
	}
	return fmt.Sprintf("note: this data dir's node %s (%s) did not answer; this is %s, another node of its cluster (start it: palyra node start --data-dir %s)",
		st.NodeID, st.Address, answered, l.Dir)
}
