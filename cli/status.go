package cli

import (
	"fmt"
	"text/tabwriter"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func statusCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "status",
		Usage: "show the node's raft state and job counts",
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
			if c.Bool("json") {
				return writeJSON(c.App.Writer, map[string]any{
					"node_id": s.NodeId, "address": s.Address, "leader_id": s.LeaderId,
					"leader_address": s.LeaderAddress, "term": s.Term, "commit_index": s.CommitIndex,
					"applied_index": s.AppliedIndex, "raft_state": s.RaftState, "jobs": s.JobsByPhase,
					"version": s.Version, "cluster_name": s.ClusterName, "ca_fingerprint": s.CaFingerprint,
					"caller": s.Caller, "uptime_ms": s.UptimeMs,
					"retention_ms": s.RetentionMs, "pruned_before": msTime(s.PrunedBeforeMs),
				})
			}
			leader := s.LeaderId + " " + s.LeaderAddress
			if s.LeaderId == "" {
				leader = "(none known: no quorum)"
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "node\t%s (%s)\ncluster\t%s\nraft\t%s, term %d, commit %d, applied %d\nleader\t%s\ncaller\t%s\nversion\t%s\n",
				s.NodeId, s.Address, s.ClusterName, s.RaftState, s.Term, s.CommitIndex, s.AppliedIndex,
				leader, s.Caller, s.Version)
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
