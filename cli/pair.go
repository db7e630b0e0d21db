package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func pairCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "pair",
		Usage: "one-time codes that let a node or a device join the cluster",
		Subcommands: []*ucli.Command{
			{
				Name:  "create",
				Usage: "make a one-time pairing code",
				Description: `Prints the code on its own line. The code pins this cluster's CA (the joiner
   checks the node it talks to before sending anything), carries a secret, works
   once cluster-wide and expires after --ttl.

   Use it on the joining machine, with the address of any node of the cluster:
     palyra node join --code CODE --peer NODE_ADDR     (a new node)
     palyra device pair --code CODE --peer NODE_ADDR   (an operator laptop)

   Every voter signs certificates, so pairing works through any node and
   survives the loss of any node, the one that created the cluster included.`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "kind", Value: "device", Usage: "what may join with it: node or device"},
					&ucli.DurationFlag{Name: "ttl", Value: 10 * time.Minute, Usage: "how long the code is valid (30s to 24h)"},
					&ucli.StringFlag{Name: "name", Usage: "a label for the member it creates"},
					&ucli.BoolFlag{Name: "operator", Usage: "device codes: the device may administer the cluster (without it, the device may run and read only its own jobs)"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Identity.CreatePairing(c.Context, connect.NewRequest(&palyrav1.CreatePairingRequest{
						Kind: c.String("kind"), TtlMs: c.Duration("ttl").Milliseconds(), Name: c.String("name"), Operator: c.Bool("operator")}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					p := resp.Msg.Pairing
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"code": resp.Msg.Code, "id": p.Id, "kind": p.Kind,
							"expires_at": msTime(p.ExpiresAtMs), "operator": p.Operator})
					}
					fmt.Fprintln(c.App.Writer, resp.Msg.Code)
					fmt.Fprintf(c.App.ErrWriter, "%s code %s, valid until %s; use it once with 'palyra %s --code CODE --peer %s'\n",
						p.Kind, p.Id, msTime(p.ExpiresAtMs), map[string]string{"node": "node join", "device": "device pair"}[p.Kind], cl.Reached())
					return nil
				},
			},
			{
				Name: "list", Usage: "list pairing codes (ids only; secrets are never stored)", Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Identity.ListPairings(c.Context, connect.NewRequest(&palyrav1.ListPairingsRequest{}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						out := []map[string]any{}
						for _, p := range resp.Msg.Pairings {
							out = append(out, map[string]any{"id": p.Id, "kind": p.Kind, "state": p.State, "name": p.Name,
								"operator": p.Operator, "created_at": msTime(p.CreatedAtMs), "expires_at": msTime(p.ExpiresAtMs),
								"created_by": p.CreatedBy, "used_by": p.UsedBy})
						}
						return writeJSON(c.App.Writer, map[string]any{"pairings": out})
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					stale := false
					fmt.Fprintln(tw, "ID\tKIND\tNAME\tOPERATOR\tSTATE\tEXPIRES\tCREATED BY\tUSED BY")
					for _, p := range resp.Msg.Pairings {
						op := fmt.Sprint(p.Operator)
						if p.Kind != "device" {
							op = "-" // only a device may be an operator
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Id, p.Kind, dash(printableText(p.Name)), op, p.State, msTime(p.ExpiresAtMs), p.CreatedBy, p.UsedBy)
						stale = stale || p.State == "stale"
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if stale {
						fmt.Fprintln(c.App.ErrWriter, "stale: made before the cluster's CA rotation ended; such a code pins the old root and no node accepts it: create a new one with 'palyra pair create'")
					}
					return nil
				},
			},
			{
				Name: "revoke", Usage: "revoke an unused pairing code", ArgsUsage: "ID", Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					id, err := oneArg(c, "pairing code id (see 'palyra pair list')")
					if err != nil {
						return err
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Identity.RevokePairing(c.Context, connect.NewRequest(&palyrav1.RevokePairingRequest{Id: id}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"id": resp.Msg.Pairing.GetId(), "state": resp.Msg.Pairing.GetState()})
					}
					fmt.Fprintf(c.App.Writer, "%s revoked\n", id)
					return nil
				},
			},
		},
	}
}
