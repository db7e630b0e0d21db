package cli

import (
	"fmt"
	"os"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func policyCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "policy",
		Usage: "the cluster's Cedar authorisation policy (deny by default)",
		Subcommands: []*ucli.Command{
			{
				Name: "get", Usage: "print the policy in force", Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Policy.GetPolicy(c.Context, connect.NewRequest(&palyrav1.GetPolicyRequest{}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"source": resp.Msg.Source, "version": resp.Msg.Version, "default": resp.Msg.IsDefault})
					}
					fmt.Fprint(c.App.Writer, resp.Msg.Source)
					return nil
				},
			},
			{
				Name: "set", Usage: "validate and store a policy; it is live on every node at once", ArgsUsage: "FILE",
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					file, err := oneArg(c, "policy file")
					if err != nil {
						return err
					}
					src, err := os.ReadFile(file)
					if err != nil {
						return fail(c, &client.Error{Code: "invalid_argument", Message: err.Error(), Hint: "start from 'palyra policy get > policy.cedar'"})
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Policy.SetPolicy(c.Context, connect.NewRequest(&palyrav1.SetPolicyRequest{Source: string(src)}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"version": resp.Msg.Version})
					}
					fmt.Fprintf(c.App.Writer, "policy version %d is live\n", resp.Msg.Version)
					return nil
				},
			},
			{
				Name:  "check",
				Usage: "evaluate a request against the policy in force and say which policies decided",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "principal", Required: true, Usage: "KIND:ID, e.g. device:d-1a2b3c4d"},
					&ucli.StringFlag{Name: "action", Required: true, Usage: "e.g. job.submit, policy.set"},
					&ucli.StringFlag{Name: "resource", Value: "Cluster::default", Usage: "Cluster::default, Job::ID or Grant::TYPE:NAME"},
					&ucli.StringFlag{Name: "context", Usage: "a JSON object, e.g. '{\"grant_host\":\"example.com\"}'"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Policy.CheckPolicy(c.Context, connect.NewRequest(&palyrav1.CheckPolicyRequest{
						Principal: c.String("principal"), Action: c.String("action"), Resource: c.String("resource"), ContextJson: c.String("context")}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					m := resp.Msg
					if c.Bool("json") {
						// A deny exits 1 as in text, so a script can test the
						// exit status either way.
						if err := writeJSON(c.App.Writer, map[string]any{"allow": m.Allow, "reasons": nonNil(m.Reasons), "errors": nonNil(m.Errors), "explanation": m.Explanation,
							"warnings": nonNil(m.Warnings)}); err != nil || m.Allow {
							return err
						}
						return ucli.Exit("", exitFailure)
					}
					for _, w := range m.Warnings {
						fmt.Fprintln(c.App.ErrWriter, "warning: "+w)
					}
					fmt.Fprintln(c.App.Writer, m.Explanation)
					if !m.Allow {
						return ucli.Exit("", exitFailure)
					}
					return nil
				},
			},
		},
	}
}
