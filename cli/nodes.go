package cli

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func nodesCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "nodes",
		Usage: "list the cluster's nodes as the node at --addr sees them",
		Description: `State comes from gossip: alive; stopped (shut down cleanly, still a
   member, expected back); dead (stopped answering: crashed or cut off); left
   ('palyra node leave'); removed ('palyra node remove'). Voter and leader from
   Raft. Every node should show the same voters and leader. RAFT is how far
   the node's state is along the leader's log, asked of each live node just
   now: "ok" (a few entries behind is normal under load), or LAGGING when it
   trails by more than a healthy follower does (250 entries) or has not
   heard from the leader lately. A lagging voter does not count towards the
   failure tolerance, and after 10 s the leader gives it no new work (look
   at its log: a full disk, say). SCHEDULING is the operator's setting (eligible, ineligible, draining;
   drained once a draining node holds nothing); a node that is
   not alive gets no new work whatever it says. PLACED counts the jobs
   placed on the node: running, or waiting there for a free slot (a worker
   takes up to four placements per slot ahead, so PLACED can exceed
   CAPACITY). --json gives it as "placed" (and, as older versions
   named it, "running").`,
		Flags: []ucli.Flag{jsonFlag},
		Action: func(c *ucli.Context) error {
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			resp, err := cl.Node.ListNodes(c.Context, connect.NewRequest(&palyrav1.ListNodesRequest{RaftProgress: true}))
			if err != nil {
				return fail(c, cl.Explain(err))
			}
			if e := removedView(c, resp.Msg.ServedBy); e != nil {
				// Its list is its own stale view (the others "dead", itself
				// alive): a trial took it for the cluster's.
				return fail(c, e)
			}
			if c.Bool("json") {
				out := []map[string]any{}
				for _, n := range resp.Msg.Nodes {
					// labels are the operator's, as in the table; the ones a
					// node sets for itself (CA keys, certificate root and
					// expiry: 'ca status' reads them) come apart.
					system := map[string]string{}
					for k, v := range n.Labels {
						if strings.HasPrefix(k, "palyra.") {
							system[k] = v
						}
					}
					out = append(out, map[string]any{"id": n.Id, "address": n.Address, "state": n.State, "voter": n.Voter,
						"leader": n.Leader, "labels": userLabels(n.Labels), "system_labels": system, "capacity": n.Capacity, "version": n.Version, "features": nonNil(n.Features), "in_raft": n.InRaft,
						"eligible": n.Eligible, "draining": n.Draining, "placed": n.Running, "running": n.Running, "raft": raftJSON(n)})
				}
				return writeJSON(c.App.Writer, map[string]any{"nodes": out, "served_by": resp.Msg.ServedBy})
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDRESS\tSTATE\tVOTER\tLEADER\tRAFT\tSCHEDULING\tPLACED\tCAPACITY\tVERSION\tLABELS")
			led := hasLeader(resp.Msg.Nodes)
			for _, n := range resp.Msg.Nodes {
				sched := schedulingText(n)
				rt := raftText(n)
				if !led {
					rt = leaderlessRaftText(n, rt)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\t%s\t%s\t%d\t%s\t%s\t%s\n", n.Id, n.Address, n.State, n.Voter, n.Leader,
					rt, sched, n.Running, capacityText(n), dash(n.Version), printableText(kv(userLabels(n.Labels))))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if !led && slices.ContainsFunc(resp.Msg.Nodes, func(n *palyrav1.NodeInfo) bool { return n.RaftKnown }) {
				// A trial read the lone survivor's LAGGING as its own fault.
				fmt.Fprintln(c.App.ErrWriter, "no node leads: nothing can be committed until a majority of voters elects a leader ('palyra status' says which voters are down)")
			}
			if note := mixedVersions(resp.Msg.Nodes); note != "" {
				fmt.Fprintln(c.App.ErrWriter, note)
			}
			return nil
		},
	}
}

// raftText is the RAFT cell: how far the node's state is along the
// leader's log, as the serving node found it just now.
func raftText(n *palyrav1.NodeInfo) string {
	switch {
	case !n.InRaft:
		return "-"
	case !n.RaftKnown:
		if n.State == "alive" {
			return "no answer"
		}
		return "-"
	case n.Leader:
		return "leader"
	case n.RaftLastContactMs < 0:
		return "LAGGING: never heard from a leader"
	case n.RaftLagging && n.RaftBehind > 0:
		return fmt.Sprintf("LAGGING: %d entries behind", n.RaftBehind)
	case n.RaftLagging:
		return fmt.Sprintf("LAGGING: leader last heard %s ago", time.Duration(n.RaftLastContactMs)*time.Millisecond)
	case n.RaftBehind > 0:
		return fmt.Sprintf("ok (%d behind)", n.RaftBehind)
	}
	return "ok"
}

// leaderlessRaftText is the RAFT cell while no node leads: every live
// server has lost touch with a leader, so none lags behind another (rt is
// raftText's cell).
func leaderlessRaftText(n *palyrav1.NodeInfo, rt string) string {
	if !strings.HasPrefix(rt, "LAGGING: ") {
		return rt
	}
	if n.RaftLastContactMs < 0 {
		return "no leader (never heard from one)"
	}
	return fmt.Sprintf("no leader (last heard %s ago)", time.Duration(n.RaftLastContactMs)*time.Millisecond)
}

// capacityText is the CAPACITY cell: a node that stopped withdrew its
// slots before it went; it says so rather than leaving the cell blank.
func capacityText(n *palyrav1.NodeInfo) string {
	if len(n.Capacity) == 0 {
		if n.State != "alive" {
			return "- (not alive)"
		}
		return "none"
	}
	return kv(n.Capacity)
}

// raftJSON is a node's raft progress for --json (null: not in raft, or it
// did not answer).
func raftJSON(n *palyrav1.NodeInfo) any {
	if !n.InRaft || !n.RaftKnown {
		return nil
	}
	return map[string]any{"last_index": n.RaftLastIndex, "applied_index": n.RaftAppliedIndex,
		"behind": n.RaftBehind, "lagging": n.RaftLagging, "last_contact_ms": n.RaftLastContactMs}
}

// schedulingText is the SCHEDULING cell: the operator's setting, and for
// a node that is not alive, that it gets no work whatever the setting.
func schedulingText(n *palyrav1.NodeInfo) string {
	switch n.State {
	case "left", "removed":
		// Out of the cluster: its setting is moot (a trial read
		// "left … eligible" as a node still counted on).
		return "- (" + n.State + ": gets none)"
	}
	sched := "eligible"
	if n.Draining {
		sched = "draining"
		if n.Running == 0 && n.State == "alive" {
			sched = "drained (draining, nothing placed)" // a trial: "draining" for ever with nothing left
		}
	} else if !n.Eligible {
		sched = "ineligible"
	}
	if n.State != "alive" {
		sched += " (not alive: gets none)"
	}
	return sched
}

func kv[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, m[k])
	}
	return strings.Join(parts, ",")
}

// userLabels leaves out the labels nodes set for themselves (palyra.*:
// the CA keys they hold, their certificate's root and expiry; 'palyra ca
// status' shows those, --json has them all).
func userLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l))
	for k, v := range l {
		if !strings.HasPrefix(k, "palyra.") {
			out[k] = v
		}
	}
	return out
}

// mixedVersions notes a cluster whose live nodes run different software
// (a rolling upgrade under way: features new nodes have wait for the
// others), naming the versions; "" when they agree.
func mixedVersions(nodes []*palyrav1.NodeInfo) string {
	byVersion := map[string][]string{}
	for _, n := range nodes {
		if n.State == "alive" && n.Version != "" {
			byVersion[n.Version] = append(byVersion[n.Version], n.Id)
		}
	}
	if len(byVersion) < 2 {
		return ""
	}
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(byVersion)) {
		parts = append(parts, fmt.Sprintf("%s on %s", v, strings.Join(byVersion[v], ", ")))
	}
	return "note: the nodes run different software (" + strings.Join(parts, "; ") + "): what the newer ones add waits until every node is upgraded"
}

// removedView is an error when the node that answered is this data dir's
// node and that node has found the cluster refusing it (removed: its view
// of the cluster is its own and stale); nil otherwise.
func removedView(c *ucli.Context, servedBy string) *client.Error {
	l := node.Layout{Dir: c.String("data-dir")}
	r, ok := l.ReadRefusal()
	if !ok {
		return nil
	}
	st, err := l.ReadState()
	if err != nil || st.NodeID == "" || st.NodeID != servedBy {
		return nil
	}
	return &client.Error{Code: "failed_precondition",
		Message: fmt.Sprintf("the node that answered, %s, was removed from the cluster (it found so at %s: %s): what it lists is its own stale view", servedBy, r.Since.UTC().Format(time.RFC3339), r.Because),
		Hint:    "ask a live member with --addr HOST:PORT; 'palyra doctor' says how to bring this machine back"}
}
