package cli

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func pruneCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "prune",
		Usage:     "remove jobs (and job arrays) that ended more than a while ago, with their results",
		ArgsUsage: " ",
		Description: `Removes every job that ended (completed, failed, aborted, expired) more than
   --older-than ago, results and all; queued and running jobs are never removed,
   and a job array goes only once all its tasks have ended. The cluster also
   prunes by itself after the retention ('palyra job retention').
   Needs the job.prune permission (operators have it).

   Disk space is not freed at once: inputs and outputs over 4 KiB, and
   modules, are blobs, which each node deletes at its blob collection,
   every minute, once no kept job names them and they were stored at least
   10 minutes ago (a grace for jobs still being accepted).

   Examples:
     palyra job prune --older-than 7d --dry-run   # how many would go
     palyra job prune --older-than 7d
     palyra job prune --older-than 0      # every ended job`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "older-than", Usage: "remove jobs that ended more than `DURATION` ago, e.g. 12h, 7d, 0", Required: true},
			&ucli.BoolFlag{Name: "dry-run", Usage: "remove nothing: say how many jobs would be removed"},
			jsonFlag,
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 0 {
				return usageErr("unexpected argument %q; give the age with --older-than", c.Args().First())
			}
			d, err := parseDays(c.String("older-than"))
			if err != nil {
				return usageErr("--older-than: %v", err)
			}
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			dry := c.Bool("dry-run")
			req := connect.NewRequest(&palyrav1.PruneJobsRequest{OlderThanMs: d.Milliseconds()})
			prune := cl.Jobs.PruneJobs
			if dry {
				prune = cl.Jobs.CountPrunableJobs
			}
			resp, err := prune(c.Context, req)
			if dry && connect.CodeOf(err) == connect.CodeUnimplemented {
				return fail(c, &client.Error{Code: "unimplemented", Message: "the node that answered is too old to count ended jobs (--dry-run); nothing was removed",
					Hint: "upgrade it, or run the dry run through an upgraded node with --addr"})
			}
			if err != nil {
				return fail(c, cl.Explain(err))
			}
			r := resp.Msg
			if dry {
				if c.Bool("json") {
					return writeJSON(c.App.Writer, map[string]any{"would_prune": r.Pruned, "before": msTime(r.BeforeMs), "dry_run": true})
				}
				fmt.Fprintf(c.App.Writer, "would prune %s that ended before %s (dry run: nothing removed)\n", countOf(int(r.Pruned), "job", "jobs"), msTime(r.BeforeMs))
				return nil
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, map[string]any{"pruned": r.Pruned, "before": msTime(r.BeforeMs)})
			}
			if r.Pruned == 0 {
				fmt.Fprintf(c.App.Writer, "no job ended before %s; nothing pruned\n", msTime(r.BeforeMs))
				return nil
			}
			fmt.Fprintf(c.App.Writer, "pruned %s that ended before %s\n%s\n", countOf(int(r.Pruned), "job", "jobs"), msTime(r.BeforeMs), blobsFreedNote)
			return nil
		},
	}
}

func retentionCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "retention",
		Usage:     "show, or set, how long ended jobs are kept before the cluster prunes them",
		ArgsUsage: "[DURATION]",
		Description: `Without an argument, shows the retention. With one (e.g. 12h, 7d, 30d;
   "default" restores the default, 24h), sets it for the whole cluster: the
   leader then prunes jobs that ended longer ago than that, results included.
   Setting it needs the job.prune permission (operators have it).`,
		Flags: []ucli.Flag{jsonFlag},
		Action: func(c *ucli.Context) error {
			if c.NArg() > 1 {
				return usageErr("%s takes at most one argument, the retention (got %d)", c.Command.HelpName, c.NArg())
			}
			var set *time.Duration
			if c.NArg() == 1 {
				var d time.Duration
				if a := c.Args().First(); a != "default" {
					var err error
					if d, err = parseDays(a); err != nil {
						var re *durationRangeError
						if errors.As(err, &re) { // the node's bounds, as it would say them
							return usageErr("retention %s is out of range: use between %s and %s, e.g. 7d ('default' restores the default, 24h)",
								a, palyrav1.FormatRetention(minRetention.Milliseconds()), palyrav1.FormatRetention(maxRetention.Milliseconds()))
						}
						return usageErr("retention: %v", err)
					}
					if d <= 0 {
						return usageErr("retention must be positive, e.g. 7d (or 'default')")
					}
					if d < minRetention || d > maxRetention { // said before anything is sent, as for 0
						return usageErr("retention %s is out of range: use between %s and %s, e.g. 7d ('default' restores the default, 24h)",
							a, palyrav1.FormatRetention(minRetention.Milliseconds()), palyrav1.FormatRetention(maxRetention.Milliseconds()))
					}
				}
				set = &d
			}
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			if set != nil {
				resp, err := cl.Jobs.SetRetention(c.Context, connect.NewRequest(&palyrav1.SetRetentionRequest{RetentionMs: set.Milliseconds()}))
				if err != nil {
					return fail(c, cl.Explain(err))
				}
				ms := resp.Msg.RetentionMs
				if c.Bool("json") {
					return writeJSON(c.App.Writer, map[string]any{"retention_ms": ms, "retention": palyrav1.FormatRetention(ms)})
				}
				fmt.Fprintf(c.App.Writer, "ended jobs are now kept for %s\n", palyrav1.FormatRetention(ms))
				return nil
			}
			resp, err := cl.Node.Status(c.Context, connect.NewRequest(&palyrav1.StatusRequest{}))
			if err != nil {
				return fail(c, cl.Explain(err))
			}
			s := resp.Msg
			if c.Bool("json") {
				return writeJSON(c.App.Writer, map[string]any{"retention_ms": s.RetentionMs, "retention": palyrav1.FormatRetention(s.RetentionMs),
					"pruned_before": nullTime(s.PrunedBeforeMs)})
			}
			fmt.Fprintf(c.App.Writer, "ended jobs are kept for %s%s\n", palyrav1.FormatRetention(s.RetentionMs), prunedNote(s.PrunedBeforeMs))
			return nil
		},
	}
}

// blobsFreedNote follows a prune that removed jobs: their blobs go later
// (node/blobgc.go: every minute, once 10 minutes old).
const blobsFreedNote = "their blobs (inputs and outputs over 4 KiB, modules no kept job uses) are deleted on every node within a few minutes: each node collects them every minute, once 10 minutes after they were stored"

// The retention a node accepts (node/api's MinRetention, MaxRetention; a
// test keeps them equal): the CLI says it for a value too long to send.
const (
	minRetention = time.Minute
	maxRetention = 3650 * day
)

// prunedNote is "; jobs that ended before T were pruned", if any were.
func prunedNote(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return "; jobs that ended before " + msTime(ms) + " were pruned"
}

// parseDays parses a duration as time.ParseDuration does, plus a leading
// count of days, whole or not: "7d", "1.5d", "1d12h", "36h", "0". One longer than a
// time.Duration holds (about 292 years) is a *durationRangeError, not a
// wrapped-around negative.
func parseDays(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	var d time.Duration
	if i := strings.IndexByte(t, 'd'); i >= 0 {
		days := t[:i]
		if strings.Contains(days, ".") {
			// 1.5d as 1.5h is read, times 24 (a trial: 1.5h was taken, 1.5d refused).
			if !decimalSyntax.MatchString(days) {
				return 0, fmt.Errorf("%q is not a duration; use e.g. 90m, 12h, 7d, 1.5d", s)
			}
			h, err := time.ParseDuration(days + "h")
			if err != nil || h > maxDuration/24 {
				return 0, &durationRangeError{s}
			}
			d = h * 24
		} else {
			n, err := strconv.ParseUint(days, 10, 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return 0, fmt.Errorf("%q is not a duration; use e.g. 90m, 12h, 7d", s)
			}
			if err != nil || n > uint64(maxDuration/day) {
				return 0, &durationRangeError{s}
			}
			d = time.Duration(n) * day
		}
		t = t[i+1:]
		if t == "" {
			return d, nil
		}
	}
	rest, err := time.ParseDuration(t)
	if err == nil && rest < 0 {
		return 0, fmt.Errorf("%q is negative; use a positive duration, e.g. 90m, 12h, 7d", s)
	}
	if err != nil {
		if durationSyntax.MatchString(t) { // well formed: ParseDuration refuses only an overflow
			return 0, &durationRangeError{s}
		}
		return 0, fmt.Errorf("%q is not a duration; use e.g. 90m, 12h, 7d", s)
	}
	if rest > maxDuration-d {
		return 0, &durationRangeError{s}
	}
	return d + rest, nil
}

const (
	day         = 24 * time.Hour
	maxDuration = time.Duration(math.MaxInt64)
)

// durationSyntax is what time.ParseDuration takes without a sign.
// decimalSyntax is a count with a fraction, as time.ParseDuration takes one.
var decimalSyntax = regexp.MustCompile(`^([0-9]+\.[0-9]*|\.[0-9]+)$`)

var durationSyntax = regexp.MustCompile(`^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// durationRangeError: a duration longer than a time.Duration holds.
type durationRangeError struct{ s string }

func (e *durationRangeError) Error() string {
	return fmt.Sprintf("%q is out of range: a duration is at most %dd (about 292 years)", e.s, maxDuration/day)
}
