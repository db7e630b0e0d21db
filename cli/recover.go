package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func nodeRecoverCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "recover",
		ArgsUsage: " ", // it refuses arguments itself, naming --data-dir
		Usage:     "make this stopped node a cluster of one, keeping every job it holds, after a quorum of voters is lost for good",
		Description: `Outage recovery, the last resort (as Consul's and Nomad's peers.json): when so
   many voters are gone for good that the cluster can never again elect a
   leader, run this on ONE survivor, the most up to date ('palyra node recover
   --dry-run' on each shows its last raft index). The node must be stopped.

   Before anything changes it asks the other voters of the last
   configuration whether their cluster has a leader, and refuses if one says
   so: recovering then would split a working cluster in two.

   It keeps everything this node's raft log holds, entries it did not know to
   be committed included, makes it the only voter, and revokes the other
   voters of its last configuration: they hold a history that would fight
   this one, so they must never start again on their old data. Jobs that ran
   on lost nodes are run again. Non-voting nodes stay members and follow.

     palyra node recover --data-dir /var/lib/palyra --dry-run   # what it would do
     palyra node recover --data-dir /var/lib/palyra --yes
     palyra node start --data-dir /var/lib/palyra
     palyra --data-dir /var/lib/palyra pair create --kind node  # rebuild: join new nodes`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "yes", Usage: "recover (without it, nothing changes)"},
			&ucli.BoolFlag{Name: "dry-run", Usage: "only show what recovering would do"},
			&ucli.BoolFlag{Name: "force", Usage: "recover even though another voter answers with a leader (it splits the cluster: stop those voters for good first), or this node holds no CA key (the result can never pair or renew)"},
			jsonFlag,
		},
		Action: nodeRecover,
	}
}

func nodeRecover(c *ucli.Context) error {
	if c.NArg() > 0 {
		return usageErr("unexpected argument %q; name the node with --data-dir", c.Args().First())
	}
	if c.Bool("yes") && c.Bool("dry-run") {
		return usageErr("give --yes or --dry-run, not both")
	}
	dataDir := c.String("data-dir")
	if dataDir == "" {
		dataDir = "palyra-data"
	}
	dry := !c.Bool("yes")
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	// What the node knows, changing nothing: the other voters are asked
	// whether their cluster still has a leader before anything is done.
	res, err := node.Recover(node.RecoverConfig{DataDir: dataDir, DryRun: true, Logger: logger})
	if err != nil {
		return fail(c, &client.Error{Code: "recover_failed", Message: err.Error(),
			Hint: "name a stopped node's data dir with --data-dir"})
	}
	alive, unsure := askVoters(c, res)
	if len(alive) > 0 && !c.Bool("force") {
		return fail(c, &client.Error{Code: "quorum_alive",
			Message: "the cluster is not lost: " + strings.Join(alive, "; ") + ". Recovering this node would split it in two clusters that both accept jobs",
			Hint:    "start this node again instead ('palyra node start --data-dir " + dataDir + "'), or take it out with 'palyra node remove'; if those voters must go for good, stop them first (or pass --force)"})
	}
	if !dry && len(unsure) > 0 && !c.Bool("force") {
		// It runs: a voter that answers at all may lead a working cluster
		// (an expired local credential is refused by live voters, and was
		// taken for a lost cluster).
		return fail(c, &client.Error{Code: "voter_alive",
			Message: "a voter of the last configuration is running: " + strings.Join(unsure, "; ") + ". If its cluster has a leader, recovering this node would split it in two",
			Hint:    "check 'palyra status' on that node; if the quorum is lost for good, stop the other voters first, or pass --force"})
	}
	if !dry && !res.HoldsCA && !c.Bool("force") {
		return fail(c, &client.Error{Code: "no_ca_key",
			Message: "this node does not hold the cluster CA: recovered, the cluster could never pair a node or device again, nor renew a certificate (each expires within its lifetime)",
			Hint:    "recover a voter that holds it (its --dry-run says so), or restore the newest snapshot ('palyra snapshot restore'); --force recovers this node anyway (to read its jobs out, say)"})
	}
	if !dry {
		res, err = node.Recover(node.RecoverConfig{DataDir: dataDir, Logger: logger})
		if err != nil {
			return fail(c, &client.Error{Code: "recover_failed", Message: err.Error(),
				Hint: "name a stopped node's data dir with --data-dir"})
		}
	}
	if c.Bool("json") {
		var servers []map[string]any
		for _, s := range res.Servers {
			servers = append(servers, map[string]any{"id": s.ID, "address": s.Address, "voter": s.Voter})
		}
		err := writeJSON(c.App.Writer, map[string]any{
			"recovered": !dry, "data_dir": dataDir, "node_id": res.NodeID, "address": res.Address,
			"last_index": res.LastIndex, "last_term": res.LastTerm, "applied_index": res.AppliedIndex,
			"jobs": res.Jobs, "servers": servers, "was_voter": res.WasVoter, "holds_ca": res.HoldsCA,
			"revoked_nodes": nonNil(res.Revoked), "warnings": nonNil(append(unsure, alive...)),
		})
		if err == nil && dry && !c.Bool("dry-run") {
			return ucli.Exit("", exitFailure)
		}
		return err
	}
	w := c.App.ErrWriter
	var servers []string
	for _, s := range res.Servers {
		role := "non-voter"
		if s.Voter {
			role = "voter"
		}
		if s.ID == res.NodeID {
			role += ", this node"
		}
		servers = append(servers, fmt.Sprintf("%s (%s)", s.ID, role))
	}
	fmt.Fprintf(w, "node %s (data dir %s, address %s)\n", res.NodeID, dataDir, res.Address)
	fmt.Fprintf(w, "  its raft log ends at index %d, term %d; %d jobs; state applied to index %d\n", res.LastIndex, res.LastTerm, res.Jobs, res.AppliedIndex)
	fmt.Fprintf(w, "  last configuration: %s\n", strings.Join(servers, ", "))
	if !res.WasVoter {
		fmt.Fprintln(w, "  WARNING: this node was not a voter; a voter that survived is likely more up to date")
	}
	if !res.HoldsCA {
		fmt.Fprintln(w, "  WARNING: this node does not hold the cluster CA; the recovered cluster cannot pair nodes or renew certificates without it")
	}
	for _, u := range unsure {
		fmt.Fprintf(w, "  WARNING: %s; make sure it is stopped for good before recovering\n", u)
	}
	for _, a := range alive { // with --force
		fmt.Fprintf(w, "  WARNING: %s\n", a)
	}
	verb := "would revoke"
	if !dry {
		verb = "revoked"
	}
	if len(res.Revoked) > 0 {
		fmt.Fprintf(w, "  %s the other voters %s: never start them again on their old data; wipe them and join them with new codes\n",
			verb, strings.Join(res.Revoked, ", "))
	}
	if dry {
		fmt.Fprintln(w, "nothing changed. Recovering makes this node the only voter of a cluster of one, keeping every job its log holds.")
		fmt.Fprintln(w, "Do it on one survivor only, when the lost voters can never come back: palyra node recover --data-dir "+dataDir+" --yes")
		if !c.Bool("dry-run") {
			return ucli.Exit("error: refusing to recover without --yes", exitFailure)
		}
		return nil
	}
	fmt.Fprintf(c.App.Writer, "recovered: node %s is now the only voter of its cluster, with %d jobs\n", res.NodeID, res.Jobs)
	fmt.Fprintf(c.App.Writer, "next:\n  palyra node start --data-dir %s    # with the flags it ran with before (--target-voters, --wasm-slots, --config …): only its address, network and metrics address are remembered\n  palyra --data-dir %s pair create --kind node    # then 'palyra node join' on each new machine\n", dataDir, dataDir)
	return nil
}

// askVoters asks each other voter of the node's last configuration, with
// the node's local operator credential and a short timeout, whether its
// cluster has a leader. alive lists those that say so; unsure, those that
// answered without saying (a refused credential, say). A voter that does
// not answer is taken as lost.
func askVoters(c *ucli.Context, res node.RecoverResult) (alive, unsure []string) {
	src, err := resolveCredential(c)
	if err != nil {
		return nil, []string{"the other voters could not be asked whether they are alive (" + err.Error() + ")"}
	}
	asked := false
	for _, s := range res.Servers {
		if !s.Voter || s.ID == res.NodeID || s.Address == "" {
			continue
		}
		if !asked {
			fmt.Fprintln(c.App.ErrWriter, "asking the other voters whether their cluster still has a leader…")
			asked = true
		}
		cl, err := client.NewCluster([]string{s.Address}, src.cred, client.Options{DialTimeout: 2 * time.Second, CallTimeout: 3 * time.Second})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
		resp, err := cl.Node.Status(ctx, connect.NewRequest(&palyrav1.StatusRequest{}))
		cancel()
		switch {
		case err == nil && resp.Msg.LeaderId != "" && resp.Msg.LeaderId != res.NodeID:
			alive = append(alive, fmt.Sprintf("voter %s at %s answers, and its cluster has a leader (%s)", s.ID, s.Address, resp.Msg.LeaderId))
		case err == nil:
			// It runs, without a leader: a survivor like this one.
		case cl.Explain(err).Code == "unreachable":
			// Lost, or stopped.
		default:
			unsure = append(unsure, fmt.Sprintf("voter %s at %s answers but would not say whether its cluster has a leader (%s)", s.ID, s.Address, cl.Explain(err).Message))
		}
		cl.Close()
	}
	return alive, unsure
}
