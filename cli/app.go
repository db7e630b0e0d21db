// Package cli is the palyra command line: urfave/cli/v2 commands for
// running a node and for operating a cluster. Everything but `node start`
// talks to nodes only through the API client (cli/client).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
)

// Version is the palyra version, set at build time with -ldflags.
var Version = "0.1.0-dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command (or the job it waited for) failed
	exitUsage   = 2 // wrong flags or arguments
)

// Main runs the CLI with args (os.Args) and returns the process exit code.
func Main(args []string) int {
	return run(context.Background(), args, os.Stdin, os.Stdout, os.Stderr)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := newApp(stdin, stdout, stderr)
	if wantsJSON(args) {
		// Under --json, stderr carries the error object and nothing else
		// (progress lines, notes and a job's stderr passed through made it
		// unparseable; the JSON on stdout holds what they said).
		app.Metadata = map[string]any{jsonStderrKey: stderr}
		app.ErrWriter = &jsonNotes{w: stderr}
	}
	err := app.RunContext(ctx, interspersed(app, args))
	if err == nil {
		return exitOK
	}
	code, msg := exitUsage, "error: "+err.Error()
	var ex ucli.ExitCoder
	if errors.As(err, &ex) {
		code, msg = ex.ExitCode(), err.Error()
	}
	if msg == "" {
		return code // printed already (as text, or as JSON under --json)
	}
	if wantsJSON(args) {
		// A script that asked for JSON gets every error as JSON too: a
		// usage error, or a failure the command reported as text.
		_ = writeJSON(stderr, map[string]any{"error": textError(msg, code)})
		return code
	}
	fmt.Fprintln(stderr, msg)
	return code
}

// wantsJSON reports whether args ask for --json output (before a "--",
// after which everything is an argument).
func wantsJSON(args []string) bool {
	for _, a := range args[min(1, len(args)):] {
		if a == "--" {
			return false
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		if !hasVal {
			return true
		}
		b, err := strconv.ParseBool(val)
		return err == nil && b
	}
	return false
}

// textError turns an error printed as text ("error: …" lines, then
// "hint: …" or "run '… --help' for usage") into the {code, message,
// hint} shape every --json error has. code is "usage" for wrong flags or
// arguments, "interrupted", or "failed".
func textError(msg string, code int) errorJSON {
	e := errorJSON{Code: "failed"}
	switch code {
	case exitUsage:
		e.Code = "usage"
	case exitInterrupted:
		e.Code = "interrupted"
	}
	var message, hint []string
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "hint: "):
			hint = append(hint, strings.TrimPrefix(line, "hint: "))
		case strings.HasPrefix(line, "run '") && (strings.HasSuffix(line, " for usage") || strings.HasSuffix(line, " for its commands")):
			hint = append(hint, line)
		case len(message) == 0:
			message = append(message, strings.TrimPrefix(line, "error: "))
		default:
			message = append(message, line)
		}
	}
	e.Message, e.Hint = strings.Join(message, "\n"), strings.Join(hint, "\n")
	return e
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *ucli.App {
	app := &ucli.App{
		Name:    "palyra",
		Usage:   "a self-hosted mesh of workers for sandboxed WebAssembly and browser jobs",
		Version: versionLine(),
		Description: `One binary is both the node and the CLI.

   Start a node:      palyra node start
   Run a job:         palyra job submit --wasm reverse.wasm --input hello --wait
   Inspect:           palyra status · palyra job list · palyra job get ID

   The CLI authenticates with the local operator credential in
   --data-dir/PALYRA_DATA_DIR (./palyra-data), or else with this device's
   paired credential (--config-dir, ~/.config/palyra). It reaches the
   cluster through any node that answers: --addr/PALYRA_ADDR when given,
   else every node recorded with the credential (refreshed from the
   cluster's member list after each successful call), so commands keep
   working while any one node is down.`,
		Reader:               stdin,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		Suggest:              true,
		Flags:                globalFlags(),
		Action:               unknownCommand,
		UsageText:            "palyra [global options] command [command options]", // what urfave prints for an app without an action
		Commands: requiredFlags(dedent(shortNames(withUnknownCommand([]*ucli.Command{nodeCommand(), nodesCommand(), jobCommand(), statusCommand(), pairCommand(), deviceCommand(),
			caCommand(), policyCommand(), secretCommand(), kvCommand(), doctorCommand(), snapshotCommand(), versionCommand(), completionCommand(), consoleCommand(), browserCommand(), metricsCommand(), skillCommand(), auditCommand(), hookCommand()})))),
		// A paired device's certificate renews after the command that
		// found it due (see renewAfter).
		After:          renewAfter,
		ExitErrHandler: func(*ucli.Context, error) {}, // Main prints and exits
		OnUsageError:   onUsageError,
	}
	app.Description = strings.ReplaceAll(app.Description, "\n   ", "\n")
	return app
}

// DefaultCallTimeout is --call-timeout's default: long enough for the
// slowest ordinary call (a 96 MiB module upload, a browser session's
// steps), short enough that a node which took a call and went silent
// does not hold a command for ever.
const DefaultCallTimeout = 5 * time.Minute

func globalFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "data-dir", Usage: "node data directory (holds the local operator credential)", EnvVars: []string{"PALYRA_DATA_DIR"}, Value: "palyra-data"},
		&ucli.StringFlag{Name: "config-dir", Usage: "where a paired device keeps its credential (default ~/.config/palyra)", EnvVars: []string{"PALYRA_CONFIG_DIR"}},
		&ucli.BoolFlag{Name: "stale", Usage: "read the serving node's replica without a quorum round trip (may lag; works without a leader)", EnvVars: []string{"PALYRA_STALE"}},
		&ucli.StringFlag{Name: "addr", Usage: "node API address `HOST:PORT`, or several separated by commas, tried in turn (default: every node recorded with the credential, learned on each successful call; else 127.0.0.1:7444)", EnvVars: []string{"PALYRA_ADDR"}},
		&ucli.DurationFlag{Name: "call-timeout", Value: DefaultCallTimeout, Usage: "give up on a call the node accepted but has not answered after `DURATION` (0: wait for ever); it may still take effect. Waiting for a job (--wait, watch, logs) is never cut short by it", EnvVars: []string{"PALYRA_CALL_TIMEOUT"}},
		&ucli.DurationFlag{Name: "dial-timeout", Value: client.DefaultDialTimeout, Usage: "how long to wait for one node to answer before giving up on it (the next is tried after 250ms already)", EnvVars: []string{"PALYRA_DIAL_TIMEOUT"}},
	}
}

// unknownCommand is the action of the app and of every command that only
// groups others: with no word it shows the help; with a word that is none
// of the commands it names the word, suggests the closest command and
// exits with the usage code (urfave/cli's own answer is "No help topic for
// 'x'", exit 3).
func unknownCommand(c *ucli.Context) error {
	if c.NArg() == 0 {
		if c.Command == nil || c.Command.Name == "" {
			return ucli.ShowAppHelp(c)
		}
		return ucli.ShowSubcommandHelp(c)
	}
	word := c.Args().First()
	cmds, path := c.App.Commands, c.App.Name
	if c.Command != nil && c.Command.Name != "" {
		cmds, path = c.Command.Subcommands, c.Command.HelpName
	}
	msg := fmt.Sprintf("error: '%s' is not a command of '%s'", word, path)
	if s, ok := elsewhere[path+" "+word]; ok {
		msg += fmt.Sprintf(". Did you mean '%s'?", s)
	} else if s := closestCommand(cmds, word); s != "" {
		msg += fmt.Sprintf(". Did you mean %q?", s)
	}
	return ucli.Exit(msg+fmt.Sprintf("\nrun '%s --help' for its commands", path), exitUsage)
}

// elsewhere names the command a user reaching for another group's verb
// means ('palyra node list' lists nodes as 'palyra nodes').
var elsewhere = map[string]string{
	"palyra node list":     "palyra nodes",
	"palyra node ls":       "palyra nodes",
	"palyra node status":   "palyra status",
	"palyra device create": "palyra pair create --kind device",
}

// shortNames gives every list command the alias ls, and every delete or
// remove command rm, where no sibling has that name (kv had them alone).
func shortNames(cmds []*ucli.Command) []*ucli.Command {
	taken := func(name string) bool {
		for _, c := range cmds {
			if c.HasName(name) {
				return true
			}
		}
		return false
	}
	for _, c := range cmds {
		short := map[string]string{"list": "ls", "delete": "rm", "remove": "rm"}[c.Name]
		if short != "" && !taken(short) {
			c.Aliases = append(c.Aliases, short)
		}
		shortNames(c.Subcommands)
	}
	return cmds
}

// withUnknownCommand sets unknownCommand on every command in cmds (and
// below) that groups subcommands and has no action of its own.
func withUnknownCommand(cmds []*ucli.Command) []*ucli.Command {
	for _, c := range cmds {
		if len(c.Subcommands) > 0 {
			if c.Action == nil {
				c.Action = unknownCommand
			}
			withUnknownCommand(c.Subcommands)
		}
	}
	return cmds
}

// requiredFlags checks the flags marked Required itself, before the
// command's action, with one usage line naming the flag and what it
// takes (urfave/cli printed the whole help page, then 'Required flag
// "peer" not set'). The help still marks them as required.
func requiredFlags(cmds []*ucli.Command) []*ucli.Command {
	for _, c := range cmds {
		requiredFlags(c.Subcommands)
		var required []ucli.Flag
		for _, f := range c.Flags {
			if r, ok := f.(ucli.RequiredFlag); ok && r.IsRequired() {
				required = append(required, f)
				unrequire(f)
			}
		}
		if len(required) == 0 || c.Action == nil {
			continue
		}
		action := c.Action
		c.Action = func(ctx *ucli.Context) error {
			for _, f := range required {
				name := f.Names()[0]
				if !ctx.IsSet(name) {
					what := ""
					if d, ok := f.(ucli.DocGenerationFlag); ok && d.GetUsage() != "" {
						what = ": " + strings.ReplaceAll(d.GetUsage(), "`", "")
					}
					return ucli.Exit(fmt.Sprintf("error: --%s is required%s\nrun '%s --help' for usage", name, what, ctx.Command.HelpName), exitUsage)
				}
				// An empty value is not one ('job deny ID --reason ""'
				// denied with no reason recorded).
				if _, ok := f.(*ucli.StringFlag); ok && strings.TrimSpace(ctx.String(name)) == "" {
					return ucli.Exit(fmt.Sprintf("error: --%s is empty: it is required and needs a value\nrun '%s --help' for usage", name, ctx.Command.HelpName), exitUsage)
				}
			}
			return action(ctx)
		}
	}
	return cmds
}

// unrequire clears a flag's Required mark (requiredFlags checks it).
func unrequire(f ucli.Flag) {
	switch f := f.(type) {
	case *ucli.StringFlag:
		f.Required = false
	case *ucli.StringSliceFlag:
		f.Required = false
	case *ucli.DurationFlag:
		f.Required = false
	case *ucli.IntFlag:
		f.Required = false
	case *ucli.Uint64Flag:
		f.Required = false
	case *ucli.BoolFlag:
		f.Required = false
	case *ucli.PathFlag:
		f.Required = false
	}
}

// dedent takes the three-space indent off the continuation lines of every
// command's description: they are written indented to read well in the
// source, and the help template indents each line itself (they came out
// six spaces in, the first line three).
func dedent(cmds []*ucli.Command) []*ucli.Command {
	for _, c := range cmds {
		c.Description = strings.ReplaceAll(c.Description, "\n   ", "\n")
		if c.OnUsageError == nil {
			c.OnUsageError = onUsageError
		}
		if c.Before == nil {
			c.Before = checkArgs
		}
		dedent(c.Subcommands)
	}
	return cmds
}

// checkArgs runs before every command's action: a command that takes no
// arguments refuses one (they were ignored: 'palyra node leave n-2'
// made the local node leave), and durations must make sense.
func checkArgs(c *ucli.Context) error {
	if cmd := c.Command; cmd != nil && !hasSubcommands(cmd) && cmd.Action != nil &&
		cmd.ArgsUsage == "" && c.NArg() > 0 && !isHelpWord(c.Args().First()) { // " ": the command says more itself
		return usageErr("unexpected argument %q: '%s' takes no arguments, only flags\nrun '%s --help' for usage", c.Args().First(), cmd.HelpName, cmd.HelpName)
	}
	return noNegativeDurations(c)
}

// isHelpWord is an argument urfave/cli takes as its help subcommand
// ('palyra status help'), which it picks after Before has run.
func isHelpWord(s string) bool { return s == "help" || s == "h" }

// hasSubcommands says whether cmd is a group: urfave/cli gives every
// command, once set up, a "help" subcommand of its own.
func hasSubcommands(cmd *ucli.Command) bool {
	for _, s := range cmd.Subcommands {
		if s.Name != "help" {
			return true
		}
	}
	return false
}

// noNegativeDurations refuses a negative value for any duration flag set
// on the command (or globally): each was taken, and ignored or read as
// "none", without a word (--wait-timeout -3s, --dial-timeout -1s, a drain
// --deadline). Zero keeps its meaning where a flag gives it one. A
// positive one under a millisecond is refused too: every duration goes
// out in milliseconds or coarser, where it became 0, "the default" (a
// --timeout 500us ran for 30s, a --deadline 999us had none).
func noNegativeDurations(c *ucli.Context) error {
	for _, cc := range c.Lineage() {
		var flags []ucli.Flag
		switch {
		case cc.Command != nil && cc.Command.Name != "":
			flags = cc.Command.Flags
		case cc.App != nil:
			flags = cc.App.Flags
		}
		for _, f := range flags {
			df, ok := f.(*ucli.DurationFlag)
			if !ok || !cc.IsSet(df.Name) {
				continue
			}
			if d := cc.Duration(df.Name); d < 0 {
				return usageErr("--%s %s is negative: give a positive duration, e.g. 30s or 10m", df.Name, d)
			} else if d > 0 && d < time.Millisecond {
				return usageErr("--%s %s is under a millisecond, the smallest unit it takes: give e.g. 10ms or 30s", df.Name, d)
			}
		}
	}
	return nil
}

// badValueRE matches the flag package's error for a value it cannot parse,
// or a number too large for its flag.
var badValueRE = regexp.MustCompile(`^invalid value "(.*)" for flag -(\S+): (parse error|value out of range)$`)

// flagRanges says what a number flag takes when the request carries less
// than the flag's type holds (its own checks refuse what is over).
var flagRanges = map[string]string{"priority": priorityRange, "retries": "from 0 to 10"}

// uintFlagRanges says what an unsigned flag takes, for a value that does
// not parse ("-3" was told "0 or more" where 0 is refused too).
var uintFlagRanges = map[string]string{"limit": "from 1 to 1000"}

var undefinedFlagRE = regexp.MustCompile(`^flag provided but not defined: (-\S+)$`)

// closestFlag is the name among flags nearest to name, if it is near
// enough to be a slip (at most a third of its letters, and 2, edited).
func closestFlag(flags []ucli.Flag, name string) string {
	best, bestD := "", 0
	for _, f := range flags {
		for _, n := range f.Names() {
			if d := editDistance(n, name); best == "" || d < bestD {
				best, bestD = n, d
			}
		}
	}
	if best == "" || bestD > max(2, len(name)/3) || bestD >= len(name) {
		return ""
	}
	return best
}

// closestCommand is the command name (or alias) nearest to word by edit
// distance, "" when none is near: "jbo" is "job" (urfave/cli's own
// suggestion, by Jaro-Winkler, offered "browser"). Between names as near,
// urfave/cli's choice decides ("nods": nodes, not node).
func closestCommand(cmds []*ucli.Command, word string) string {
	var near []string
	bestD := -1
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		for _, n := range c.Names() {
			switch d := editDistance(n, word); {
			case bestD < 0 || d < bestD:
				near, bestD = []string{c.Name}, d
			case d == bestD && !slices.Contains(near, c.Name):
				near = append(near, c.Name)
			}
		}
	}
	if len(near) == 0 || bestD > max(2, len(word)/3) || bestD >= len(word) {
		return ""
	}
	if len(near) > 1 && ucli.SuggestCommand != nil {
		said := ucli.SuggestCommand(cmds, word)
		for _, n := range near {
			if strings.Contains(said, fmt.Sprintf("%q", n)) {
				return n
			}
		}
	}
	return near[0]
}

var negativeArgRE = regexp.MustCompile(`^flag provided but not defined: -?(-[0-9][0-9.]*[a-zµ]*)$`)

// onUsageError answers a command's bad flags in one line and the usage
// exit code: urfave/cli printed the whole help page after a bare "parse
// error". A duration says what a duration looks like (days are not a
// unit there).
func onUsageError(c *ucli.Context, err error, _ bool) error {
	msg := err.Error()
	if m := badValueRE.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("invalid value %q for --%s", m[1], m[2])
		outOfRange := m[3] == "value out of range"
		if outOfRange {
			msg += ": out of range"
		}
		var flags []ucli.Flag
		if c.Command != nil {
			flags = append(flags, c.Command.Flags...)
		}
		flags = append(flags, c.App.Flags...)
		for _, f := range flags {
			if !slices.Contains(f.Names(), m[2]) {
				continue
			}
			switch f.(type) {
			case *ucli.DurationFlag:
				msg += ": want a duration such as 90s, 15m or 12h (units ns, us, ms, s, m, h; no days: 2 days is 48h)"
			case *ucli.IntFlag, *ucli.Int64Flag:
				if r, ok := flagRanges[m[2]]; outOfRange && ok {
					msg += ": want a whole number " + r
				} else if outOfRange {
					msg += fmt.Sprintf(": want a whole number from %d to %d", math.MinInt64, math.MaxInt64)
				} else {
					msg += ": want a whole number"
				}
			case *ucli.UintFlag, *ucli.Uint64Flag:
				if r, ok := flagRanges[m[2]]; outOfRange && ok {
					msg += ": want a whole number " + r
				} else if outOfRange {
					msg += fmt.Sprintf(": want a whole number from 0 to %d", uint64(math.MaxUint64))
				} else if r, ok := uintFlagRanges[m[2]]; ok {
					msg += ": want a whole number " + r
				} else {
					msg += ": want a whole number, 0 or more"
				}
			}
			break
		}
	}
	// "flag needs an argument: -file" (the flag package's single dash).
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		msg = fmt.Sprintf("--%s needs a value", strings.TrimLeft(name, "-"))
	}
	// A misspelt flag ("--wiat") gets the closest one the command has.
	if m := undefinedFlagRE.FindStringSubmatch(msg); m != nil && negativeArgRE.FindStringSubmatch(msg) == nil {
		name := strings.TrimLeft(m[1], "-")
		msg = fmt.Sprintf("unknown flag --%s", name)
		var flags []ucli.Flag
		if c.Command != nil {
			flags = append(flags, c.Command.Flags...)
		}
		flags = append(flags, c.App.Flags...)
		if s := closestFlag(flags, name); s != "" {
			msg += fmt.Sprintf(": did you mean --%s?", s)
		}
	}
	// A negative number or duration given as an argument ("job retention
	// -2h") reads as an unknown flag: say what it is.
	if m := negativeArgRE.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("%q reads as a flag (it starts with -): to pass it as an argument, put -- before the arguments (a negative duration or count is refused anyway)", m[1])
	}
	help := c.App.Name
	if c.Command != nil && c.Command.HelpName != "" {
		help = c.Command.HelpName
	}
	return ucli.Exit(fmt.Sprintf("error: %s\nrun '%s --help' for usage", msg, help), exitUsage)
}
