package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func secretCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "secret",
		Usage: "secrets for jobs: stored sealed, readable only by jobs granted them",
		Subcommands: []*ucli.Command{
			{
				Name:      "set",
				Usage:     "store a secret (the value is read from --from-file, or from stdin: typed or pasted at a terminal without echo, ended with Ctrl-D)",
				ArgsUsage: "NAME",
				Description: `The value never appears in logs, job records or API answers. A job reads it
   only when submitted with --secret NAME and the policy grants it:
     palyra secret set api-token < token.txt
     palyra job submit --wasm app.wasm --secret api-token

   NAME is 1 to 128 letters, digits, '.', '_' or '-'. The value is stored
   byte for byte, a trailing newline included ('echo x' gives 2 bytes; a
   warning says so): use printf, or --trim-newline to leave one out.`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "from-file", Usage: "read the value from `FILE`"},
					&ucli.BoolFlag{Name: "trim-newline", Usage: "leave out one trailing newline (\\n or \\r\\n) of the value"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					name, err := oneArg(c, "secret name")
					if err != nil {
						return err
					}
					var value []byte
					if f := c.String("from-file"); f != "" {
						value, err = os.ReadFile(f)
					} else {
						if f, ok := c.App.Reader.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
							// Typed at a terminal: not echoed (it was, onto
							// the screen and into any transcript).
							// The prompt shows under --json too (a person
							// is typing; no script reads this stderr).
							fmt.Fprintln(errJSONWriter(c), "secret value (not echoed; end with Enter, then Ctrl-D):")
							value, err = readTyped(c.Context, f)
							if interrupted(c) {
								return ucli.Exit("interrupted: nothing stored", exitInterrupted)
							}
						} else {
							value, err = io.ReadAll(io.LimitReader(c.App.Reader, 1<<20))
						}
					}
					if err != nil {
						return fail(c, &client.Error{Code: "invalid_argument", Message: err.Error()})
					}
					trimmed := false
					if c.Bool("trim-newline") {
						before := len(value)
						value = bytes.TrimSuffix(value, []byte("\n"))
						if len(value) < before {
							value = bytes.TrimSuffix(value, []byte("\r"))
						}
						trimmed = len(value) < before
					}
					if len(value) == 0 {
						if f := c.String("from-file"); f != "" {
							what := "empty"
							if trimmed {
								what = "only a newline"
							}
							return usageErr("%s is %s: a secret needs a value", f, what)
						}
						if trimmed {
							return usageErr("the secret value is only a newline; pipe the value in or use --from-file")
						}
						return usageErr("empty secret value; pipe it in or use --from-file")
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					if _, err := cl.Secrets.SetSecret(c.Context, connect.NewRequest(&palyrav1.SetSecretRequest{Name: name, Value: value})); err != nil {
						return fail(c, cl.Explain(err))
					}
					if value[len(value)-1] == '\n' {
						// Kept as given (other tools do), but rarely meant.
						fmt.Fprintf(c.App.ErrWriter, "warning: stored %d bytes ending in a newline; use printf or --trim-newline to leave it out\n", len(value))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"name": name, "bytes": len(value)})
					}
					fmt.Fprintf(c.App.Writer, "secret %s stored (%s)\n", name, sizeText(uint64(len(value))))
					return nil
				},
			},
			{
				Name: "list", Usage: "list secret names (never values)", Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Secrets.ListSecrets(c.Context, connect.NewRequest(&palyrav1.ListSecretsRequest{}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						out := []map[string]any{}
						for _, s := range resp.Msg.Secrets {
							out = append(out, map[string]any{"name": s.Name, "set_at": msTime(s.SetAtMs), "set_by": s.SetBy})
						}
						return writeJSON(c.App.Writer, map[string]any{"secrets": out})
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tSET AT\tSET BY")
					for _, s := range resp.Msg.Secrets {
						fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, msTime(s.SetAtMs), s.SetBy)
					}
					if err := tw.Flush(); err != nil || len(resp.Msg.Secrets) > 0 {
						return err
					}
					fmt.Fprintln(c.App.ErrWriter, "no secrets (store one with 'palyra secret set NAME')")
					return nil
				},
			},
			{
				Name: "delete", Usage: "delete a secret", ArgsUsage: "NAME",
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					name, err := oneArg(c, "secret name")
					if err != nil {
						return err
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					if _, err := cl.Secrets.DeleteSecret(c.Context, connect.NewRequest(&palyrav1.DeleteSecretRequest{Name: name})); err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]string{"deleted": name})
					}
					fmt.Fprintf(c.App.Writer, "secret %s deleted\n", name)
					return nil
				},
			},
		},
	}
}
