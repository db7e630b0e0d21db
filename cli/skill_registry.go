package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/identity/skill"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// The registry commands: install once, usable from every node.
func skillRegistryCommands() []*ucli.Command {
	return []*ucli.Command{
		{
			Name:      "install",
			Usage:     "install a .palyra-skill file into the cluster (verified, audited, replicated)",
			ArgsUsage: "FILE",
			Description: `The node checks the package (structure, SHA256SUMS, the signature against the
   key the cluster trusts for its publisher), audits it and validates every
   module, stores the file and modules as replicated blobs and adds the skill
   to the registry. A package that fails the audit is installed quarantined,
   with the reasons ('palyra skill get ID'); it does not run until an operator
   enables it.

   Installing a skill id again upgrades it, from the same publisher only (a
   skill id belongs to the publisher that installed it first; an operator
   removes it before another publisher's package can take the id). A lower
   version is refused unless --allow-downgrade; the same version must be the
   same package. A status an operator set (disabled, quarantined) stays
   after an upgrade, and an upgrade that would leave a bound hook unable to
   run (its tool gone, or the new version quarantined) is refused.

   A publisher must be trusted first ('palyra skill trust add NAME KEY'), or
   --trust-on-first-use pins the key this package is signed with (which
   needs the skill.trust permission, like 'trust add').`,
			Flags: []ucli.Flag{
				&ucli.BoolFlag{Name: "trust-on-first-use", Usage: "trust the package's signing key for its publisher if the cluster trusts no key for it yet"},
				&ucli.BoolFlag{Name: "allow-downgrade", Usage: "let a lower version replace the installed one"},
				jsonFlag,
			},
			Action: func(c *ucli.Context) error {
				file, err := oneArg(c, "package file")
				if err != nil {
					return err
				}
				data, err := os.ReadFile(file)
				if err != nil {
					return localFail(c, "invalid_argument", err.Error(), "")
				}
				if len(data) > skill.MaxPackageBytes+1<<20 {
					return localFail(c, "invalid_argument", fmt.Sprintf("%s is %s; a package holds at most 64 MiB", file, mib(int64(len(data)))), "")
				}
				cl, err := dial(c)
				if err != nil {
					return err
				}
				defer cl.Close()
				resp, err := cl.Skills.InstallSkill(c.Context, connect.NewRequest(&palyrav1.InstallSkillRequest{Package: data, TrustOnFirstUse: c.Bool("trust-on-first-use"), AllowDowngrade: c.Bool("allow-downgrade")}))
				if err != nil {
					return fail(c, cl.Explain(err))
				}
				sk := resp.Msg.Skill
				if c.Bool("json") {
					if err := writeJSON(c.App.Writer, map[string]any{"skill": sk, "trusted_now": resp.Msg.TrustedNow, "unchanged": resp.Msg.Unchanged}); err != nil {
						return err
					}
				} else if resp.Msg.Unchanged {
					fmt.Fprintf(c.App.Writer, "%s %s is installed already, with these contents: nothing changed (%s)\n", sk.SkillId, sk.Version, sk.Status)
				} else {
					if resp.Msg.TrustedNow {
						fmt.Fprintf(c.App.ErrWriter, "publisher %s is now trusted with key %s (first use)\n", sk.Publisher, sk.PublisherKey)
					}
					was := ""
					if sk.PreviousVersion != "" {
						was = " (replacing " + sk.PreviousVersion + ")"
					}
					fmt.Fprintf(c.App.Writer, "%s %s installed%s, %s\n", sk.SkillId, sk.Version, was, sk.Status)
					for _, f := range sk.Findings {
						fmt.Fprintf(c.App.Writer, "  %s: %s\n", sk.Status, f)
					}
					if sk.Status != "active" {
						fmt.Fprintf(c.App.ErrWriter, "the skill does not run until an operator enables it: 'palyra skill enable %s'\n", sk.SkillId)
					}
				}
				if sk.Status != "active" {
					// Not running what was installed is a failure, with --json too.
					return ucli.Exit("", exitFailure)
				}
				return nil
			},
		},
		{
			Name:  "list",
			Usage: "list installed skills",
			Flags: []ucli.Flag{jsonFlag},
			Action: func(c *ucli.Context) error {
				cl, err := dial(c)
				if err != nil {
					return err
				}
				defer cl.Close()
				resp, err := cl.Skills.ListSkills(c.Context, connect.NewRequest(&palyrav1.ListSkillsRequest{}))
				if err != nil {
					return fail(c, cl.Explain(err))
				}
				if c.Bool("json") {
					// An object, as every other list is ({"jobs": …}).
					return writeJSON(c.App.Writer, map[string]any{"skills": nonNil(resp.Msg.Skills)})
				}
				if len(resp.Msg.Skills) == 0 {
					fmt.Fprintln(c.App.Writer, "no skills installed (install one with 'palyra skill install FILE'; 'palyra skill --help' says how to make one)")
					return nil
				}
				tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SKILL\tVERSION\tSTATUS\tPUBLISHER\tTOOLS\tINSTALLED")
				for _, s := range resp.Msg.Skills {
					var tools []string
					for _, t := range s.Tools {
						tools = append(tools, t.Id)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.SkillId, s.Version, s.Status, s.Publisher, strings.Join(tools, ","),
						time.UnixMilli(s.InstalledAtMs).UTC().Format(time.RFC3339))
				}
				return tw.Flush()
			},
		},
		{
			Name:      "get",
			Usage:     "show an installed skill: tools, schemas, grants, status and findings",
			ArgsUsage: "SKILL",
			Flags:     []ucli.Flag{jsonFlag},
			Action: func(c *ucli.Context) error {
				id, err := oneArg(c, "skill id")
				if err != nil {
					return err
				}
				cl, err := dial(c)
				if err != nil {
					return err
				}
				defer cl.Close()
				resp, err := cl.Skills.GetSkill(c.Context, connect.NewRequest(&palyrav1.GetSkillRequest{SkillId: id}))
				if err != nil {
					return fail(c, cl.Explain(err))
				}
				s := resp.Msg.Skill
				if c.Bool("json") {
					return writeJSON(c.App.Writer, s)
				}
				printSkill(c.App.Writer, s)
				return nil
			},
		},
		skillStatusCommand("enable", "active", "let an installed skill's tools run again (over its audit findings, if quarantined)"),
		skillStatusCommand("disable", "disabled", "stop an installed skill's tools from running"),
		skillStatusCommand("quarantine", "quarantined", "stop a skill's tools from running and record why (--reason)"),
		{
			Name:        "remove",
			Usage:       "remove an installed skill (its blobs are collected once nothing names them)",
			ArgsUsage:   "SKILL",
			Description: hooksBoundHelp("remove"),
			Flags:       []ucli.Flag{forceUnbindFlag, jsonFlag},
			Action: func(c *ucli.Context) error {
				id, err := oneArg(c, "skill id")
				if err != nil {
					return err
				}
				cl, err := dial(c)
				if err != nil {
					return err
				}
				defer cl.Close()
				resp, err := cl.Skills.RemoveSkill(c.Context, connect.NewRequest(&palyrav1.RemoveSkillRequest{SkillId: id, Force: c.Bool("force")}))
				if err != nil {
					return fail(c, cl.Explain(err))
				}
				if c.Bool("json") {
					return writeJSON(c.App.Writer, map[string]any{"removed": id, "unbound_hooks": hookIDs(resp.Msg.UnboundHooks)})
				}
				fmt.Fprintf(c.App.Writer, "%s removed\n", id)
				printUnbound(c.App.Writer, resp.Msg.UnboundHooks, true)
				return nil
			},
		},
		skillTrustCommand(),
		skillRunCommand(),
	}
}

func printSkill(w io.Writer, s *palyrav1.SkillInfo) {
	fmt.Fprintf(w, "skill      %s %s (%s) by %s\n", s.SkillId, s.Version, s.Name, s.Publisher)
	fmt.Fprintf(w, "status     %s (since %s, by %s)\n", s.Status, time.UnixMilli(s.StatusAtMs).UTC().Format(time.RFC3339), s.StatusBy)
	for _, f := range s.Findings {
		fmt.Fprintf(w, "finding    %s\n", f)
	}
	fmt.Fprintf(w, "package    sha256 %s, %d bytes, key %s\n", s.PackageSha256, s.PackageSize, s.PublisherKey)
	fmt.Fprintf(w, "grants     http_hosts=%s allow_private=%v secrets=%s kv_prefix=%q %s\n",
		strings.Join(s.HttpHosts, ","), s.AllowPrivate, strings.Join(s.Secrets, ","), s.KvPrefix, limitsText(s.Fuel, s.MemoryBytes, s.WallClockMs))
	for _, t := range s.Tools {
		fmt.Fprintf(w, "tool       %s (%s) module sha256 %s", t.Id, t.Name, t.ModuleSha256)
		if t.RequiresApproval {
			fmt.Fprint(w, " requires_approval")
		}
		if t.Deterministic {
			fmt.Fprint(w, " deterministic")
		}
		fmt.Fprintln(w)
		if c := t.Capabilities; c != nil {
			fmt.Fprintf(w, "           grants        %s\n", toolGrantsText(c.HttpHosts, c.AllowPrivate, c.Secrets, c.KvPrefix))
		}
		fmt.Fprintf(w, "           input_schema  %s\n           output_schema %s\n", oneLineJSON(t.InputSchema), oneLineJSON(t.OutputSchema))
	}
}

// toolGrantsText shows a tool's own capabilities, which its runs ask for
// instead of the skill's.
func toolGrantsText(hosts []string, allowPrivate bool, secrets []string, kv string) string {
	if len(hosts) == 0 && !allowPrivate && len(secrets) == 0 && kv == "" {
		return "none (its runs ask for no grants)"
	}
	return fmt.Sprintf("http_hosts=%s allow_private=%v secrets=%s kv_prefix=%q (instead of the skill's)",
		strings.Join(hosts, ","), allowPrivate, strings.Join(secrets, ","), kv)
}

// limitsText shows a skill's limits as its runs get them: a limit the
// manifest leaves at zero shows the default that applies, marked so
// (before, "fuel=0 memory_mib=0" read as no memory at all).
func limitsText(fuel, memoryBytes uint64, wallClockMs int64) string {
	show := func(name string, v, def uint64) string {
		if v == 0 {
			return fmt.Sprintf("%s=%d (default)", name, def)
		}
		return fmt.Sprintf("%s=%d", name, v)
	}
	mem := show("memory_mib", memoryBytes>>20, palyrav1.DefaultMemoryBytes>>20)
	if memoryBytes%(1<<20) != 0 {
		mem = fmt.Sprintf("memory_bytes=%d", memoryBytes)
	}
	return show("fuel", fuel, palyrav1.DefaultFuel) + " " + mem + " " + show("wall_clock_ms", uint64(max(wallClockMs, 0)), uint64(palyrav1.DefaultTimeoutMs))
}

func oneLineJSON(s string) string { return strings.Join(strings.Fields(s), " ") }

// forceUnbindFlag lets disable, quarantine and remove go ahead over the
// hooks bound to the skill, unbinding them.
var forceUnbindFlag = &ucli.BoolFlag{Name: "force", Usage: "go ahead although hooks are bound to the skill: unbind them in the same change (they are listed)"}

// hooksBoundHelp documents what disable, quarantine and remove do with the
// hooks bound to the skill.
func hooksBoundHelp(verb string) string {
	again := "after\n   'palyra skill enable', if the skill comes back"
	if verb == "remove" {
		again = "once the skill\n   is installed again"
	}
	return `Refused while hooks are bound to the skill ('palyra hook list'): a hook
   whose skill cannot run would refuse every job (before_run) or be skipped
   (after_run, events). The error names each hook; unbind them first
   ('palyra hook unbind HOOK_ID'), or ` + verb + ` with --force, which unbinds
   them in the same change and lists them (bind them again ` + again + `). --force never leaves a
   hook dangling: jobs keep being accepted, without the unbound hooks.`
}

func hookIDs(hs []*palyrav1.HookInfo) []string {
	ids := []string{}
	for _, h := range hs {
		ids = append(ids, h.Id)
	}
	return ids
}

// printUnbound lists the hooks a --force unbound, with the command that
// binds each again once its skill is back (after a remove, the skill must
// be installed again first).
func printUnbound(w io.Writer, hs []*palyrav1.HookInfo, removed bool) {
	for _, h := range hs {
		again := "bind it again with"
		if removed {
			again = "once the skill is installed again, bind it with"
		}
		fmt.Fprintf(w, "hook %s unbound (%s -> %s/%s); %s 'palyra hook bind %s %s %s'\n", h.Id, h.Event, h.SkillId, h.Tool, again, h.Event, h.SkillId, h.Tool)
	}
}

func skillStatusCommand(name, status, usage string) *ucli.Command {
	flags := []ucli.Flag{jsonFlag}
	if status == "quarantined" {
		flags = append(flags, &ucli.StringFlag{Name: "reason", Usage: "why (recorded with the skill)", Required: true})
	}
	desc := ""
	if status != "active" {
		flags = append(flags, forceUnbindFlag)
		desc = hooksBoundHelp(name)
	}
	return &ucli.Command{
		Name:        name,
		Usage:       usage,
		ArgsUsage:   "SKILL",
		Description: desc,
		Flags:       flags,
		Action: func(c *ucli.Context) error {
			id, err := oneArg(c, "skill id")
			if err != nil {
				return err
			}
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			resp, err := cl.Skills.SetSkillStatus(c.Context, connect.NewRequest(&palyrav1.SetSkillStatusRequest{
				SkillId: id, Status: status, Reason: c.String("reason"), Force: c.Bool("force")}))
			if err != nil {
				return fail(c, cl.Explain(err))
			}
			if c.Bool("json") {
				printUnbound(c.App.ErrWriter, resp.Msg.UnboundHooks, false)
				return writeJSON(c.App.Writer, resp.Msg.Skill)
			}
			if resp.Msg.Unchanged {
				fmt.Fprintf(c.App.Writer, "%s is %s already: nothing changed\n", id, resp.Msg.Skill.Status)
				return nil
			}
			fmt.Fprintf(c.App.Writer, "%s is %s\n", id, resp.Msg.Skill.Status)
			printUnbound(c.App.Writer, resp.Msg.UnboundHooks, false)
			return nil
		},
	}
}

func skillTrustCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "trust",
		Usage: "the publishers whose packages this cluster installs, and their keys",
		Subcommands: []*ucli.Command{
			{
				Name:      "add",
				Usage:     "trust a publisher's key (as 'palyra skill keygen' printed it)",
				ArgsUsage: "PUBLISHER KEY",
				Flags: []ucli.Flag{
					&ucli.BoolFlag{Name: "replace", Usage: "replace the key already trusted for this publisher"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					if c.NArg() != 2 {
						return usageErr("%s takes a publisher name and its key (ed25519:…), got %s", c.Command.HelpName, argCount(c.NArg()))
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Skills.TrustPublisher(c.Context, connect.NewRequest(&palyrav1.TrustPublisherRequest{
						Name: c.Args().Get(0), Key: c.Args().Get(1), Replace: c.Bool("replace")}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, resp.Msg.Publisher)
					}
					fmt.Fprintf(c.App.Writer, "publisher %s trusted with %s\n", resp.Msg.Publisher.Name, resp.Msg.Publisher.Key)
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list trusted publishers",
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Skills.ListPublishers(c.Context, connect.NewRequest(&palyrav1.ListPublishersRequest{}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"publishers": nonNil(resp.Msg.Publishers)})
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "PUBLISHER\tKEY\tBY")
					for _, p := range resp.Msg.Publishers {
						fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Key, p.By)
					}
					if err := tw.Flush(); err != nil || len(resp.Msg.Publishers) > 0 {
						return err
					}
					fmt.Fprintln(c.App.ErrWriter, "no trusted publishers (trust one with 'palyra skill trust add PUBLISHER KEY')")
					return nil
				},
			},
			{
				Name:      "remove",
				Usage:     "stop trusting a publisher (installed skills stay; new installs are refused)",
				ArgsUsage: "PUBLISHER",
				Flags:     []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					name, err := oneArg(c, "publisher")
					if err != nil {
						return err
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					if _, err := cl.Skills.UntrustPublisher(c.Context, connect.NewRequest(&palyrav1.UntrustPublisherRequest{Name: name})); err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]string{"untrusted": name})
					}
					fmt.Fprintf(c.App.Writer, "publisher %s is no longer trusted\n", name)
					return nil
				},
			},
		},
	}
}

func skillRunCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "run",
		Usage:     "run one tool of an installed skill as a job, on any worker",
		ArgsUsage: "SKILL TOOL",
		Description: `The input (JSON) must satisfy the tool's input_schema, or the run is refused
   before anything is stored; the output must satisfy its output_schema, or the
   job fails with output_invalid. The run gets the capabilities the skill's
   manifest declares, each checked against your policy as a job's grants are:
     palyra skill run example.web wordcount --input '{"text":"to be or not"}' --wait`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "input", Usage: "the tool's input, a JSON `DOCUMENT`"},
			&ucli.StringFlag{Name: "input-file", Usage: "read the input from `FILE` ('-' for stdin)"},
			&ucli.BoolFlag{Name: "wait", Usage: "wait for the run to end and print its output"},
			&ucli.DurationFlag{Name: "wait-timeout", Usage: "with --wait, give up waiting after `DURATION` (the run goes on)", DefaultText: "none: until the run ends"},
			&ucli.DurationFlag{Name: "timeout", Usage: "bound the run (at most the skill's wall_clock_ms)", DefaultText: "the skill's wall_clock_ms"},
			&ucli.StringFlag{Name: "idempotency-key", Usage: "a `KEY` that makes resending this run safe (the first run's job is returned)"},
			&ucli.DurationFlag{Name: "approval-ttl", Usage: "for a tool that requires approval: how long the run waits for a decision before it expires", DefaultText: "24h"},
			jsonFlag,
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() != 2 {
				return usageErr("%s takes the skill id and the tool id, got %s", c.Command.HelpName, argCount(c.NArg()))
			}
			var input []byte
			switch f := c.String("input-file"); {
			case c.IsSet("input") && f != "":
				return usageErr("give --input or --input-file, not both")
			case f == "-":
				b, err := io.ReadAll(io.LimitReader(c.App.Reader, 2<<20))
				if err != nil {
					return localFail(c, "invalid_argument", err.Error(), "")
				}
				input = b
			case f != "":
				b, err := os.ReadFile(f)
				if err != nil {
					return localFail(c, "invalid_argument", err.Error(), "")
				}
				input = b
			default:
				input = []byte(c.String("input"))
			}
			if len(input) == 0 {
				input = []byte("{}")
			}
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			resp, err := cl.Skills.RunSkill(c.Context, connect.NewRequest(&palyrav1.RunSkillRequest{
				SkillId: c.Args().Get(0), Tool: c.Args().Get(1), Input: input,
				IdempotencyKey: c.String("idempotency-key"), TimeoutMs: c.Duration("timeout").Milliseconds(),
				ApprovalTtlMs: c.Duration("approval-ttl").Milliseconds()}))
			if err != nil {
				return fail(c, cl.Explain(err))
			}
			job := resp.Msg.Job
			if job.Phase == palyrav1.JobPhase_JOB_PHASE_WAITING_FOR_APPROVAL && !c.Bool("json") && !c.Bool("wait") {
				printApprovalHint(c.App.ErrWriter, job.Id) // with --wait, waitJob says it
			}
			if !c.Bool("wait") {
				if c.Bool("json") {
					return writeJSON(c.App.Writer, toJobJSON(job))
				}
				fmt.Fprintln(c.App.Writer, job.Id)
				return nil
			}
			ctx, cancel := withWaitTimeout(c)
			defer cancel()
			job, err = waitJob(ctx, cl, job.Id, waitOpts{progress: c.App.ErrWriter, giveUp: giveUpFor(c)})
			if err != nil {
				return waitFailed(c, cl, err)
			}
			return printEnded(c, job)
		},
	}
}

// decideCommand is 'job approve' or 'job deny'.
func decideCommand(name string, approve bool) *ucli.Command {
	usage := "approve a job waiting for approval: it is queued and runs"
	reason := &ucli.StringFlag{Name: "reason", Usage: "why (recorded with the job)"}
	if !approve {
		usage = "deny a job waiting for approval: it ends aborted with the reason"
		reason.Required = true
	}
	return &ucli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "ID",
		Description: `A run of a skill tool marked requires_approval waits in phase
   waiting_for_approval ('palyra job list --phase waiting_for_approval') until a
   person approves or denies it, or its approval expires (phase expired; 24h by
   default, 'palyra skill run --approval-ttl'). Who may decide is the policy's
   job.approve action (operators under the default policy).`,
		Flags: []ucli.Flag{reason, jsonFlag},
		Action: func(c *ucli.Context) error {
			id, err := oneArg(c, "job id")
			if err != nil {
				return err
			}
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			resp, err := cl.Approvals.DecideJob(c.Context, connect.NewRequest(&palyrav1.DecideJobRequest{Id: id, Approve: approve, Reason: c.String("reason")}))
			if err != nil {
				return fail(c, cl.Explain(err))
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, toJobJSON(resp.Msg.Job))
			}
			fmt.Fprintf(c.App.Writer, "job %s %s\n", id, resp.Msg.Job.Phase.WireName())
			return nil
		},
	}
}
