package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

var hookEvents = []string{"before_run", "after_run", "skill:installed", "skill:enabled", "skill:disabled", "skill:quarantined", "node:joined"}

func hookCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "hook",
		Usage: "bind events to skill tools: a guard before jobs run, reactions after they end or when skills and nodes change",
		Description: `A before_run hook runs its tool before a job is accepted, with the job's
   description as input ({"event":"before_run","hook":ID,"job":{kind, submitter,
   module_sha256, input_size, allow_hosts, secrets, kv_prefix, skill_id, ...}}),
   and prints {"decision": D, "reason": "...", "annotation": "..."}. With several
   hooks the strongest decision wins: continue < annotate < request_approval <
   block < fail_run. block and fail_run refuse the job (nothing is stored);
   request_approval makes it wait for 'palyra job approve'; annotate adds a note
   to the job. A hook that cannot run or answers nonsense refuses the job.

   Other events run their tool as an ordinary job with the event as input, once
   per event: after_run ({"event":"after_run","job":{id, phase, exit_code, ...}}),
   skill:installed, skill:enabled, skill:disabled, skill:quarantined,
   node:joined ({"event":..., "subject": ID}).

     palyra hook bind before_run example.guard gate`,
		Subcommands: []*ucli.Command{
			{
				Name:      "bind",
				Usage:     "bind an event to a skill's tool",
				ArgsUsage: "EVENT SKILL TOOL",
				Description: `EVENT is one of: before_run, after_run, skill:installed, skill:enabled,
   skill:disabled, skill:quarantined, node:joined. The skill must be installed
   and active, and the tool's input_schema must accept the input that event
   gives (the bind is refused otherwise). What each event's input holds and
   what a before_run tool decides (continue, annotate, request_approval,
   block, fail_run): 'palyra hook --help'.

     palyra hook bind before_run example.guard gate
     palyra hook bind after_run example.audit record`,
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					if c.NArg() != 3 {
						return usageErr("%s takes an event (%s), a skill id and a tool id; got %s", c.Command.HelpName, strings.Join(hookEvents, ", "), argCount(c.NArg()))
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Hooks.BindHook(c.Context, connect.NewRequest(&palyrav1.BindHookRequest{Event: c.Args().Get(0), SkillId: c.Args().Get(1), Tool: c.Args().Get(2)}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					h := resp.Msg.Hook
					if c.Bool("json") {
						return writeJSON(c.App.Writer, h)
					}
					fmt.Fprintf(c.App.Writer, "%s: %s -> %s/%s\n", h.Id, h.Event, h.SkillId, h.Tool)
					return nil
				},
			},
			{
				Name:      "unbind",
				Usage:     "remove a hook",
				ArgsUsage: "HOOK",
				Flags:     []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					id, err := oneArg(c, "hook id")
					if err != nil {
						return err
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					if _, err := cl.Hooks.UnbindHook(c.Context, connect.NewRequest(&palyrav1.UnbindHookRequest{Id: id})); err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]string{"unbound": id})
					}
					fmt.Fprintf(c.App.Writer, "%s unbound\n", id)
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list hooks",
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Hooks.ListHooks(c.Context, connect.NewRequest(&palyrav1.ListHooksRequest{}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"hooks": nonNil(resp.Msg.Hooks)})
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "HOOK\tEVENT\tSKILL\tTOOL\tBY\tAT")
					for _, h := range resp.Msg.Hooks {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.Id, h.Event, h.SkillId, h.Tool, h.By, time.UnixMilli(h.AtMs).UTC().Format(time.RFC3339))
					}
					if err := tw.Flush(); err != nil || len(resp.Msg.Hooks) > 0 {
						return err
					}
					fmt.Fprintln(c.App.ErrWriter, "no hooks bound (bind one with 'palyra hook bind EVENT SKILL TOOL')")
					return nil
				},
			},
		},
	}
}
