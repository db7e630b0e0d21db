package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

var waitTimeoutFlag = &ucli.DurationFlag{Name: "wait-timeout", Usage: "with --wait: stop waiting `DURATION` after the job is accepted (the job carries on); by default --wait waits for the job's end, but gives up within seconds on a job no node in the cluster can run", DefaultText: "none"}

var jsonFlag = &ucli.BoolFlag{Name: "json", Usage: "print machine-readable JSON"}

var outputDirFlag = &ucli.StringFlag{Name: "output-dir", Usage: "job arrays: write task i's stdout to `DIR`/00000i.out (its stderr to .err, if any; .failed, saying why, for a task that did not complete, and .out only if it wrote something) instead of printing them; DIR must be new or empty"}

func jobCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "job",
		Usage: "submit and inspect jobs",
		Subcommands: []*ucli.Command{
			{
				Name:      "submit",
				Usage:     "submit a WebAssembly job (WASI preview 1: stdin in, stdout/stderr out), a job array, or a browser job (--browser SCRIPT.json)",
				ArgsUsage: " ",
				Description: `Prints the job id once the job is durably accepted (committed through Raft).
   With --wait, streams until the job ends, then prints its stdout on stdout and
   its stderr on stderr; exits 0 if it completed, 1 otherwise with the reason.

   Job arrays: --inputs FILE (one task per line) or --input-dir DIR (one task
   per file, in name order) submits one task per input, all with the same
   module and settings, accepted together in one commit. The id printed is
   the array's; task i is ID.i. With --wait, shows progress on stderr, then
   prints every task's stdout in task order (a newline added after an output
   that lacks one, an empty output as an empty line, so line N is task N's),
   or writes DIR/000042.out (and .err) with --output-dir (a new or empty
   directory: another run's files would mix with this one's; a task that
   did not complete gets DIR/000042.failed, saying why, and a .out only if
   it wrote something; with --input-dir, DIR/inputs.tsv names each task's
   file); each
   task that did not complete is reported on stderr, and the command exits
   1 if any did not.

   Inputs and outputs larger than 4 KiB are stored as content-addressed
   blobs on several nodes, not in the Raft log; the CLI shows them as usual.

   Every submission carries an idempotency key: --idempotency-key KEY, or
   a random one this command makes (cli-…, shown by 'job get'). When an
   answer is lost (a leader change, a node stopping), the command sends
   the submission again with its key, a few times within about a second,
   and the cluster answers with the job the first one made: nothing is
   submitted twice. A key belongs to its submitter, is at most 256 bytes,
   and is remembered while its job is kept (the retention: a day after the
   job ends, by default); the same key with a different payload is refused.

   Examples:
     palyra job submit --wasm reverse.wasm --input hello --wait
     palyra job submit --wasm reverse.wasm --inputs words.txt --wait
     palyra job submit --wasm resize.wasm --input-dir photos/ --wait --output-dir out/`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "wasm", Usage: "path of the `FILE` holding the wasm module (wasip1)"},
					&ucli.StringFlag{Name: "browser", Usage: "path of a browser job `SCRIPT.json` (steps: navigate, click, type, press, wait_for, extract, evaluate, screenshot, pdf; format: runtime/browser/SCRIPT.md, --browser-schema); the hosts its navigate steps name are granted"},
					&ucli.BoolFlag{Name: "browser-schema", Usage: "print the JSON Schema of browser scripts and exit"},
					&ucli.StringSliceFlag{Name: "allow-host", Usage: "`HOST` the job may reach (also its subdomains; repeatable; a policy grant)"},
					&ucli.BoolFlag{Name: "allow-private", Usage: "let the job reach private, loopback and link-local addresses (a policy grant)"},
					&ucli.BoolFlag{Name: "deterministic", Usage: "wasm: run on a virtual clock that advances with fuel, with randomness seeded by the module and input and sleeps that take no time: the same module and input print the same and use the same fuel anywhere"},
					&ucli.StringSliceFlag{Name: "secret", Usage: "secret `NAME` the job may read (repeatable; a policy grant)"},
					&ucli.StringFlag{Name: "kv-prefix", Usage: "key-value `PREFIX` the job may read and write (a policy grant)"},
					&ucli.StringFlag{Name: "input", Usage: "`TEXT` given to the job on stdin"},
					&ucli.StringFlag{Name: "input-file", Usage: "`FILE` whose bytes are given to the job on stdin ('-' for this command's stdin)"},
					&ucli.StringFlag{Name: "inputs", Usage: "job array: one task per line of `FILE` ('-' for stdin), the line without its newline (\\n or \\r\\n) as the task's stdin"},
					&ucli.StringFlag{Name: "input-dir", Usage: "job array: one task per regular file in `DIR`, in name order (hidden .files skipped), the file as the task's stdin"},
					&ucli.DurationFlag{Name: "timeout", Usage: "wall-clock limit, e.g. 1s, 5m; at most 24h", DefaultText: "30s"},
					&ucli.StringFlag{Name: "memory", Usage: "linear-memory limit, e.g. 16MiB, 1GiB (default 64MiB)"},
					&ucli.Uint64Flag{Name: "fuel", Usage: "wasm: instruction budget, about one unit per instruction run; the job fails out_of_fuel once it is spent (0 = node default, " + groupDigits(palyrav1.DefaultFuel) + " units, about 3–15 s of CPU; no budget is unlimited)"},
					&ucli.StringFlag{Name: "max-output", Usage: "bound on stdout and on stderr, each, e.g. 4MiB (default 1MiB)"},
					&ucli.IntFlag{Name: "priority", Usage: "higher runs first when capacity is short (" + priorityRange + ")"},
					&ucli.StringSliceFlag{Name: "constraint", Usage: "run only on nodes with label `k=v` (equality only; repeatable)"},
					&ucli.UintFlag{Name: "retries", Usage: "extra attempts, with backoff, for retryable failures (max 10)"},
					&ucli.DurationFlag{Name: "deadline", Usage: "the job expires if not completed within this time of submission", DefaultText: "none"},
					&ucli.StringFlag{Name: "idempotency-key", Usage: "`KEY` that makes submitting again safe: a submission with a key used before returns that job (a different payload is refused); without it, each run makes a random key"},
					&ucli.BoolFlag{Name: "wait", Usage: "wait for the job to finish and print its output"},
					waitTimeoutFlag,
					outputDirFlag,
					jsonFlag,
				},
				Action: jobSubmit,
			},
			{
				Name: "get", Usage: "show one job (its output included), or a job array's counts per phase", ArgsUsage: "ID",
				Description: `ID is a job's id (j- and 16 hex digits, as 'job submit' printed it), a
   job array's (its counts per phase, not its outputs: 'palyra job watch ID'
   prints those), or one task of an array, ID.N, N from 0 to the array's size
   minus one: task N ran line N+1 of the --inputs file, or the (N+1)th file
   of --input-dir in name order.

   A job run more than once lists its earlier attempts: where each ran,
   when it ended and why (its worker died, stopped or lost its lease, or a
   failed run was retried).

   Examples:
     palyra job get j-0123456789abcdef           # a job, or an array's counts
     palyra job get j-0123456789abcdef.7         # task 7 of an array, its output included
     palyra job list --array j-0123456789abcdef  # every task of an array`,
				Flags:  []ucli.Flag{jsonFlag},
				Action: jobGet,
			},
			browseCommand(),
			artifactCommand(),
			{
				Name: "watch", Usage: "stream a job's phase changes until it ends; for a job array, its progress then its outputs", ArgsUsage: "ID",
				Description: `For a job: one line per phase change (with --json, one JSON object per line).
   For a job array: progress on stderr until every task has ended, then each
   task's stdout in task order (or files with --output-dir), as 'job submit
   --wait' does; with --json, one document {"array": …, "tasks": […]}.
   Exits 1 if the job, or any task, did not complete.

   A node that goes away while it serves the watch (stopped, restarted,
   killed: 2 s without an answer) is left for another node the command
   knows (--addr A,B,C, the credential's nodes, or those the cluster
   names), or for the same one once it serves again; stderr says through
   which. 'job submit --wait' does the same.`,
				Flags:  []ucli.Flag{outputDirFlag, jsonFlag},
				Action: jobWatch,
			},
			{
				Name: "logs", Usage: "print a job's stdout and stderr; with -f, follow a running job's as they are written", ArgsUsage: "ID",
				Description: `While the job runs, its output comes live from the worker that runs it,
   through whichever node you reach; once it has ended, from its final
   result (which is authoritative: a live reader that fell more than 1 MiB
   behind is told what it missed, and the final output has it). stdout goes
   to stdout, stderr to stderr, notes (a new attempt, a gap) to stderr.
   A job that has not started (queued, waiting for approval, or placed on
   a worker that holds it until one of its slots frees) has no output
   yet: without -f, stderr says so and why it waits; with -f, stderr says
   why it waits (each time that changes) until it runs. Waiting to start on
   a job that no node in the cluster can run (its constraints match no
   node, or no node offers its kind), -f gives up within seconds, exit 1,
   saying why, as 'job submit --wait' does; the job stays queued.

   With -f, a node that goes away while it serves the logs (stopped,
   restarted, killed) is left for another node the command knows, as 'job
   watch' does; stderr says through which, and the output goes on exactly
   where it was (through a node older than this command, it starts over and
   what was printed is skipped: after a gap a few lines may repeat).

   With --json, one JSON object per line as the output comes: {"stdout",
   "stderr", "note", "attempt", "phase"} (fields without a value left out;
   the last one of an ended job carries its phase).

   Examples:
     palyra job logs j-0123456789abcdef        # what it has written so far
     palyra job logs -f j-0123456789abcdef     # follow until it ends`,
				Flags:  []ucli.Flag{&ucli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep streaming until the job ends"}, jsonFlag},
				Action: jobLogs,
			},
			{
				Name: "list", Usage: "list jobs, newest first, a page at a time (never their inputs or outputs)",
				Description: `Lists jobs newest first (--oldest-first for acceptance order), at most
   --limit per page; when there are more, prints the command for the next page
   on stderr (with --json: next_cursor, ID@INDEX, which goes on past a job
   pruned meanwhile; next_after_id is the last job's id). --array ID lists one array's tasks in
   task order; --arrays lists the arrays themselves, one row each with its
   counts. Inputs and outputs are never listed (their sizes are, in --json);
   read one job's with 'palyra job get ID', an array's with 'palyra job watch ID'.

   Examples:
     palyra job list --phase failed
     palyra job list --array j-1a2b3c4d5e6f7a8b --phase failed`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "phase", Usage: "only jobs in this `PHASE` (queued, running, completed, failed, aborted, …)"},
					&ucli.UintFlag{Name: "limit", Usage: "at most `N` jobs per page (at most 1000)", Value: 100},
					&ucli.StringFlag{Name: "after", Usage: "continue after `CURSOR` (the next page, as printed: ID@INDEX, which goes on even once that job is pruned; a job ID works too)"},
					&ucli.StringFlag{Name: "node", Usage: "only jobs placed on node `ID`"},
					&ucli.StringFlag{Name: "array", Usage: "only the tasks of job array `ID`, in task order"},
					&ucli.BoolFlag{Name: "oldest-first", Usage: "list in acceptance order instead of newest first"},
					&ucli.BoolFlag{Name: "arrays", Usage: "list the job arrays themselves, one row each with its counts (not jobs and tasks)"},
					jsonFlag,
				},
				Action: jobList,
			},
			{
				Name: "cancel", Usage: "cancel jobs (aborted; a running instance is stopped), or every unfinished task of a job array", ArgsUsage: "ID [ID...]",
				Description: `Each ID is a job's id, a job array's (every task that has not ended is
   aborted; ended ones keep their results), or one task of an array, ID.N
   (N from 0 to the array's size minus one), which cancels that task alone.
   With several IDs each is cancelled in turn; one that cannot be (not
   found, already ended) is reported and the others are still cancelled,
   and the command then exits 1.

   Examples:
     palyra job cancel j-0123456789abcdef      # a job, or a whole array
     palyra job cancel j-0123456789abcdef.7    # task 7 of an array only
     palyra job cancel j-0123456789abcdef j-fedcba9876543210`,
				Flags: []ucli.Flag{jsonFlag}, Action: jobCancel,
			},
			pruneCommand(),
			retentionCommand(),
			decideCommand("approve", true),
			decideCommand("deny", false),
		},
	}
}

func oneArg(c *ucli.Context, what string) (string, error) {
	if c.NArg() == 1 && c.Args().First() == "" {
		return "", usageErr("%s: the %s is empty", c.Command.HelpName, what)
	}
	if c.NArg() != 1 {
		return "", usageErr("%s takes exactly one argument, the %s (got %d)", c.Command.HelpName, what, c.NArg())
	}
	return c.Args().First(), nil
}

func jobSubmit(c *ucli.Context) error {
	if c.Bool("browser-schema") {
		_, err := c.App.Writer.Write(palyrav1.BrowserScriptSchema)
		return err
	}
	if c.NArg() > 0 {
		return usageErr("unexpected argument %q; pass the module with --wasm FILE", c.Args().First())
	}
	var module, script []byte
	var err error
	if c.IsSet("wasm") == c.IsSet("browser") {
		return usageErr("give exactly one of --wasm FILE or --browser SCRIPT.json")
	}
	if c.IsSet("browser") {
		// A browser job has no stdin, no linear memory, no fuel and no
		// key-value store: these were taken and ignored.
		for _, f := range []string{"input", "input-file", "memory", "fuel", "kv-prefix"} {
			if c.IsSet(f) {
				return usageErr("--%s applies to wasm jobs only; a browser job's limits are --timeout and --max-output (runtime/browser/SCRIPT.md)", f)
			}
		}
	}
	constraints, err := submitFlagValues(c)
	if err != nil {
		return err
	}
	switch {
	case c.IsSet("wasm"):
		if module, err = readBounded(c.String("wasm"), palyrav1.MaxModuleBytes); err != nil {
			hint := "pass an existing .wasm file with --wasm"
			var se *sizeError
			if errors.As(err, &se) {
				hint = fmt.Sprintf("a module may be at most %s: strip it (wasm-strip, or build Go with -ldflags='-s -w')", client.SizeOf(palyrav1.MaxModuleBytes, 0))
			}
			return fail(c, &client.Error{Code: "invalid_argument", Message: readFailure("module", c.String("wasm"), err), Hint: hint})
		}
		if len(module) == 0 {
			return fail(c, &client.Error{Code: "invalid_module", Message: fmt.Sprintf("--wasm %s is empty (0 bytes): no module in it", c.String("wasm")),
				Hint: "pass the .wasm file your build wrote (a build that failed may leave an empty file behind)"})
		}
	default:
		if script, err = readBounded(c.String("browser"), maxScriptRead); err != nil {
			return fail(c, &client.Error{Code: "invalid_argument", Message: readFailure("script", c.String("browser"), err), Hint: "pass an existing JSON script with --browser"})
		}
	}
	inputs, inputNames, err := arrayInputs(c)
	if err != nil {
		return err
	}
	if c.IsSet("output-dir") && (inputs == nil || !c.Bool("wait")) {
		return usageErr("--output-dir writes the outputs of a job array: use it with --inputs or --input-dir, and --wait")
	}
	if dir := c.String("output-dir"); dir != "" {
		// Before anything is submitted: an array that ran with nowhere
		// to put its results would be lost to this command.
		if err := checkOutputDir(dir); err != nil {
			return err
		}
		if err := makeOutputDir(dir); err != nil {
			return fail(c, &client.Error{Code: "io_error", Message: fmt.Sprintf("cannot write to --output-dir %s: %v", dir, err),
				Hint: "give a directory you can create and write to; nothing was submitted"})
		}
	}
	var input []byte
	switch {
	case c.IsSet("input") && c.IsSet("input-file"):
		return usageErr("use either --input or --input-file, not both")
	case c.IsSet("input"):
		input = []byte(c.String("input"))
		if c.String("input") == "-" {
			// '-' means stdin to --input-file, not here: say so, since
			// the job gets the one byte "-" as its input.
			fmt.Fprintln(c.App.ErrWriter, "note: --input - gives the job the text \"-\"; to pass stdin use --input-file -")
		}
	case c.String("input-file") == "-":
		if input, err = readAllBounded(c.App.Reader, palyrav1.MaxInputBytes); err != nil {
			return fail(c, &client.Error{Code: "invalid_argument", Message: readFailure("input", "stdin", err), Hint: "pass less input, or have the job fetch its data"})
		}
	case c.IsSet("input-file"):
		if input, err = readBounded(c.String("input-file"), palyrav1.MaxInputBytes); err != nil {
			hint := "pass an existing file with --input-file"
			var se *sizeError
			if errors.As(err, &se) {
				hint = "pass less input, or have the job fetch its data"
			}
			return fail(c, &client.Error{Code: "invalid_argument", Message: readFailure("input", c.String("input-file"), err), Hint: hint})
		}
	}
	var mem uint64
	if s := c.String("memory"); s != "" {
		if mem, err = ParseSize(s); err != nil {
			return usageErr("--memory: %v", err)
		}
	}
	var maxOut uint64
	if s := c.String("max-output"); s != "" {
		if maxOut, err = ParseSize(s); err != nil {
			return usageErr("--max-output: %v", err)
		}
	}
	if c.IsSet("deadline") && c.Duration("deadline") <= 0 {
		return usageErr("--deadline must be positive, e.g. 10m")
	}
	if c.IsSet("timeout") && c.Duration("timeout") <= 0 {
		return usageErr("--timeout must be positive, e.g. 1s or 5m")
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	req := &palyrav1.SubmitJobRequest{
		WasmModule: module, BrowserScript: script, AllowHosts: append(c.StringSlice("allow-host"), navigateHosts(script)...), AllowPrivate: c.Bool("allow-private"), Deterministic: c.Bool("deterministic"),
		SecretNames: c.StringSlice("secret"), KvPrefix: c.String("kv-prefix"),
		Input: input, TimeoutMs: c.Duration("timeout").Milliseconds(),
		MemoryBytes: mem, Fuel: c.Uint64("fuel"), MaxOutputBytes: maxOut,
		Priority: int32(c.Int("priority")), Constraints: constraints, Retries: uint32(c.Uint("retries")), // in range: submitFlagValues
		DeadlineMs: c.Duration("deadline").Milliseconds(), IdempotencyKey: submitKey(c),
		Inputs: inputs,
	}
	// One call submits and waits (resending with the key made for it); a
	// key the user gave keeps Submit's "replayed" notice.
	if c.Bool("wait") && len(script) == 0 && len(inputs) == 0 && c.String("idempotency-key") == "" {
		return runAndWait(c, cl, req)
	}
	resp, err := cl.Submit(c.Context, req)
	if err != nil {
		if interrupted(c) {
			return stoppedFollowing(c, "job", "")
		}
		return fail(c, moduleFileError(c, outcomeUnknown(cl.Explain(err), submitUnknownHint(req.IdempotencyKey))))
	}
	job := resp.Job
	if resp.Replayed && c.String("idempotency-key") != "" { // with a key made here, a replay is a resend's
		fmt.Fprintf(c.App.ErrWriter, "idempotency key matched job %s submitted earlier; not submitted again\n", job.Id)
	}
	if a := resp.Array; a != nil {
		if !c.Bool("wait") {
			if c.Bool("json") {
				return writeJSON(c.App.Writer, toArrayJSON(a))
			}
			fmt.Fprintln(c.App.Writer, a.Id)
			if isTerminal(c.App.ErrWriter) {
				fmt.Fprintf(c.App.ErrWriter, "array of %d tasks accepted; follow it with 'palyra job watch %s'\n", a.Size, a.Id)
			}
			return nil
		}
		// The progress bar on a terminal does not show the id: say it
		// first, so the array can be found again.
		tasks := fmt.Sprintf("%d tasks", a.Size)
		if a.Size == 1 {
			tasks = "1 task"
		}
		fmt.Fprintf(c.App.ErrWriter, "array %s: %s submitted; waiting for them to end (they go on if this stops: 'palyra job watch %s')\n", a.Id, tasks, a.Id)
		src := taskInputs{names: inputNames}
		if c.IsSet("inputs") {
			src.file = c.String("inputs")
		}
		return followArray(c, cl, a.Id, true, src)
	}
	if !c.Bool("wait") {
		if c.Bool("json") {
			return writeJSON(c.App.Writer, toJobJSON(job))
		}
		fmt.Fprintln(c.App.Writer, job.Id)
		return nil
	}
	if isTerminal(c.App.ErrWriter) {
		fmt.Fprintf(c.App.ErrWriter, "job %s accepted; waiting…\n", job.Id)
	}
	ctx, cancel := withWaitTimeout(c)
	defer cancel()
	job, err = waitJob(ctx, cl, job.Id, waitOpts{progress: c.App.ErrWriter, giveUp: giveUpFor(c)})
	if err != nil {
		return waitFailed(c, cl, err)
	}
	return printEnded(c, job)
}

// priorityRange is what --priority takes: the API's int32.
const priorityRange = "from -2147483648 to 2147483647"

// submitFlagValues refuses submit flags whose values the request cannot
// carry (a --priority or --retries that would wrap to 32 bits, an
// explicitly empty --kv-prefix, which would mean no grant) and returns the
// --constraint items as a map. The node checks the constraints too; they
// are checked here as --label checks a node's labels.
func submitFlagValues(c *ucli.Context) (map[string]string, error) {
	if p := c.Int("priority"); p < math.MinInt32 || p > math.MaxInt32 {
		return nil, usageErr("--priority %d is out of range: give a whole number %s", p, priorityRange)
	}
	if r := c.Uint("retries"); r > math.MaxUint32 {
		return nil, usageErr("--retries %d is over the limit of 10: use --retries 10 or less", r)
	}
	if d := c.Duration("timeout"); d > 24*time.Hour {
		// The cluster's bound (node/api MaxTimeout), said before anything
		// is read or sent, as a usage error like a malformed --timeout.
		return nil, usageErr("--timeout %v is over the 24h a job may run; use --timeout 24h or less", d)
	}
	if c.IsSet("kv-prefix") && c.String("kv-prefix") == "" {
		return nil, usageErr("empty key-value prefix name in --kv-prefix: give the prefix the job may use, e.g. --kv-prefix app/ (leave the flag out for no key-value access)")
	}
	if p := c.String("kv-prefix"); p != "" && !strings.HasSuffix(p, "/") {
		// A prefix is a prefix of bytes: "app" grants "appx/…" too.
		fmt.Fprintf(c.App.ErrWriter, "note: --kv-prefix %s also grants keys such as %sx/…; end it with / (%s/) to grant only %s/…\n", p, p, p, p)
	}
	constraints := map[string]string{}
	for _, it := range c.StringSlice("constraint") {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return nil, usageErr("--constraint %q is not k=v", it)
		}
		if op := palyrav1.ComparisonIn(k, v); op != "" {
			return nil, usageErr("--constraint %q: constraints are equality only (k=v), not %s: the job runs only on nodes whose label k is exactly v", it, op)
		}
		constraints[k] = v
	}
	return constraints, nil
}

// moduleFileError names the --wasm file in the node's refusal of the
// module (invalid_module: bad magic, malformed, WebAssembly text…): the
// node knows only the bytes.
func moduleFileError(c *ucli.Context, e *client.Error) *client.Error {
	if e == nil || e.Code != "invalid_module" || !c.IsSet("wasm") {
		return e
	}
	return &client.Error{Code: e.Code, Message: fmt.Sprintf("--wasm %s: %s", c.String("wasm"), e.Message), Hint: e.Hint}
}

// runAndWait submits one wasm job and follows it to its end in one call.
func runAndWait(c *ucli.Context, cl *client.Client, req *palyrav1.SubmitJobRequest) error {
	tty := isTerminal(c.App.ErrWriter)
	var last *palyrav1.Job
	// --wait-timeout counts from the job's acceptance, as it does when the
	// job is submitted and then watched: the submission itself may take a
	// while (a before_run hook deciding), and a wait that ran out before
	// the job had an id could only say "deadline exceeded".
	d := c.Duration("wait-timeout")
	ctx, cancel := context.WithCancel(context.WithValue(c.Context, waitTimeoutKey{}, d))
	defer cancel()
	var waitTimer *time.Timer
	defer func() {
		if waitTimer != nil {
			waitTimer.Stop()
		}
	}()
	g := &giveUpTimer{d: giveUpFor(c), cancel: cancel}
	defer g.stop()
	reasons := &reasonPrinter{w: c.App.ErrWriter}
	cl.Notify = reconnectNotices(c.App.ErrWriter)
	job, err := cl.Run(ctx, req, func(j *palyrav1.Job) {
		if last == nil && d > 0 {
			waitTimer = time.AfterFunc(d, cancel)
		}
		reasons.see(j)
		g.see(j)
		if tty && (last == nil || last.Phase != j.Phase || last.Attempt != j.Attempt) {
			if last == nil {
				fmt.Fprintf(c.App.ErrWriter, "job %s accepted; waiting…\n", j.Id)
			} else {
				fmt.Fprintf(c.App.ErrWriter, "job %s %s (attempt %d)\n", j.Id, j.Phase.WireName(), j.Attempt)
			}
		}
		last = j
	})
	if err != nil && interrupted(c) {
		id := ""
		if last != nil {
			id = last.Id
		}
		err = &interruptedError{id: id, err: err}
	} else if err != nil && last == nil {
		err = moduleFileError(c, outcomeUnknown(cl.Explain(err), submitUnknownHint(req.IdempotencyKey)))
	}
	if err != nil && last != nil && ctx.Err() != nil && c.Context.Err() == nil {
		if g.fired.Load() {
			err = &stillQueuedError{job: last, id: last.Id, unplaceable: true}
		} else {
			err = &stillQueuedError{job: last, id: last.Id, after: c.Duration("wait-timeout")}
		}
	}
	if err != nil {
		return waitFailed(c, cl, err)
	}
	return printEnded(c, job)
}

// waitFailed reports a wait that ended without the job ending.
func waitFailed(c *ucli.Context, cl *client.Client, err error) error {
	var ie *interruptedError
	if errors.As(err, &ie) {
		return stoppedFollowing(c, "job", ie.id)
	}
	var sq *stillQueuedError
	if errors.As(err, &sq) {
		if c.Bool("json") && sq.job != nil {
			writeJSON(c.App.Writer, toJobJSON(sq.job))
		}
		return ucli.Exit(sq.Error(), exitFailure)
	}
	return fail(c, cl.Explain(err))
}

// printEnded prints an ended job's output (or --json) and fails unless it
// completed.
func printEnded(c *ucli.Context, job *palyrav1.Job) error {
	printed := job.Stderr // what of stderr went out, for the line end below
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, toJobJSON(job)); err != nil {
			return err
		}
	} else if vals, failed := partialValues(job); failed {
		// A failed browser job's values are not its output: none is no
		// "{}" block, and those set before the failure are labelled.
		if vals != nil {
			fmt.Fprintf(c.App.ErrWriter, "%s:\n%s\n", partialHeading, vals)
		}
		c.App.ErrWriter.Write(job.Stderr)
	} else {
		completed := job.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED
		c.App.Writer.Write(job.Stdout)
		if n := len(job.Stdout); n > 0 && job.Stdout[n-1] != '\n' && (isTerminal(c.App.Writer) || !completed) {
			// On a terminal, end the line (a browser job's values are one
			// JSON object without a newline), so the next line or the
			// shell's prompt does not run into it; a pipe gets the bytes
			// of a job that completed. One that did not is cut short (an
			// overflow, a timeout): its failure line follows, and must not
			// run into it where stdout and stderr meet (2>&1).
			fmt.Fprintln(c.App.Writer)
		}
		stderr := job.Stderr
		if !completed && job.Error != nil {
			// The failure line below quotes stderr's last line (a non-zero
			// exit's message): print the rest, not that line twice.
			stderr = stderrBeforeQuote(stderr, job.Error.Message)
		}
		c.App.ErrWriter.Write(stderr)
		printed = stderr
	}
	if job.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		return nil
	}
	if n := len(printed); n > 0 && printed[n-1] != '\n' && !c.Bool("json") {
		// The failure line starts a line of its own (a stderr cut short
		// by its bound ends mid-line).
		fmt.Fprintln(c.App.ErrWriter)
	}
	return ucli.Exit(jobReason(job), exitFailure)
}

// partialHeading labels the values a browser job's steps set before it
// failed (or was cancelled).
const partialHeading = "partial values (set by its steps before the job stopped)"

// partialValues reports whether j is a browser job that ended without
// completing, and the values its steps set before it ended: nil when they
// set none (its output is then "{}", which is no values block worth
// printing). Such values are partial, never the job's output.
func partialValues(j *palyrav1.Job) (vals []byte, failed bool) {
	if j.Kind != "browser" || !j.Phase.Terminal() || j.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		return nil, false
	}
	vals = bytes.TrimSpace(j.Stdout)
	if len(vals) == 0 || bytes.Equal(vals, []byte("{}")) {
		return nil, true
	}
	return vals, true
}

// jobReason is the one-line reason a job did not complete.
func jobReason(j *palyrav1.Job) string {
	msg := fmt.Sprintf("job %s %s", j.Id, j.Phase.WireName())
	if j.Error != nil {
		msg += fmt.Sprintf(": %s (%s)", j.Error.Message, j.Error.Code)
		if j.Error.Hint != "" {
			msg += "; " + j.Error.Hint
		}
	}
	return msg
}

// waitOpts says how waitJob waits.
type waitOpts struct {
	// progress gets phase changes (on a terminal) and pending reasons.
	progress io.Writer
	// giveUp, when positive, ends the wait once the job has stayed queued
	// that long because no node in the cluster can run it.
	giveUp time.Duration
}

// stillQueuedError ends a wait on a job that is still queued: no node can
// run it (unplaceable) or the caller's --wait-timeout passed.
type stillQueuedError struct {
	job         *palyrav1.Job // the last state seen; nil if none
	id          string
	unplaceable bool
	after       time.Duration // the --wait-timeout, when that ended it
}

func (e *stillQueuedError) Error() string {
	phase, reason := "queued", ""
	if e.job != nil {
		phase, reason = e.job.Phase.WireName(), e.job.PendingReason
	}
	msg := "job " + e.id + " is still " + phase
	if e.after > 0 {
		msg = fmt.Sprintf("gave up waiting after %s: %s", e.after, msg)
	}
	if reason != "" {
		msg += ": " + reason
	}
	if e.unplaceable && e.job != nil && e.job.Kind == "browser" {
		if h := browserHint(e.job.PendingReason); h != "" {
			msg += " (" + h + ")"
		}
	}
	return msg + fmt.Sprintf(". It stays %s: follow it with 'palyra job watch %s' or cancel it with 'palyra job cancel %s'", phase, e.id, e.id)
}

// chromiumHint is what to do when no node can run browser jobs.
const chromiumHint = "install Chromium on a worker (Debian: apt-get install -y chromium-headless-shell; running nodes notice it within 10s, no restart needed), or make a node that has it eligible again ('palyra node eligibility ID --enable'; 'palyra nodes' shows each node's browser slots)"

// browserHint is chromiumHint for a browser job waiting for reason, or
// nothing when the reason is the job's own constraint: no node matching
// it is not a missing Chromium (the hint said "install it" to a job whose
// --constraint matched no node, and to a cluster whose only browser node
// was made ineligible).
func browserHint(reason string) string {
	if strings.Contains(reason, "matching") {
		return ""
	}
	return chromiumHint
}

// unplaceable reports whether j waits because no node in the cluster can
// run it at all (not merely because every slot is busy).
func unplaceable(j *palyrav1.Job) bool {
	return j != nil && j.Phase == palyrav1.JobPhase_JOB_PHASE_QUEUED && strings.HasPrefix(j.PendingReason, "no eligible node")
}

// giveUpTimer cancels a wait once a job has been unplaceable for d.
type giveUpTimer struct {
	d      time.Duration
	cancel context.CancelFunc
	t      *time.Timer
	fired  atomic.Bool
}

// see notes the job's latest state: it arms the timer when the job turns
// unplaceable and disarms it when it stops being so.
func (g *giveUpTimer) see(j *palyrav1.Job) {
	if g.d <= 0 {
		return
	}
	switch {
	case unplaceable(j) && g.t == nil:
		g.t = time.AfterFunc(g.d, func() { g.fired.Store(true); g.cancel() })
	case !unplaceable(j) && g.t != nil:
		g.t.Stop()
		g.t = nil
	}
}

func (g *giveUpTimer) stop() {
	if g.t != nil {
		g.t.Stop()
	}
}

// reasonPrinter prints a queued job's pending reason each time it changes.
type reasonPrinter struct {
	w        io.Writer
	last     string
	approval bool // the approval hint was printed
	seen     bool
	told     uint32 // the latest attempt whose end was printed (or known at the first sight)
}

func (r *reasonPrinter) see(j *palyrav1.Job) {
	// An attempt that ended without ending the job (its worker died or
	// stopped, its lease lapsed, its run failed and is retried): said once,
	// terminal or not, the job's earlier history at the first sight left out.
	for _, e := range newlyEnded(j, r.told) {
		if r.seen {
			fmt.Fprintf(r.w, "job %s attempt %d on %s ended (%s: %s); it runs again\n", j.Id, e.Attempt, e.NodeId, e.Code, printableText(e.Reason))
		}
		r.told = e.Attempt
	}
	r.seen = true
	if j.Phase == palyrav1.JobPhase_JOB_PHASE_WAITING_FOR_APPROVAL && !r.approval {
		// A job a before_run hook (or a requires_approval tool) holds:
		// say how it goes on, as 'skill run' does.
		r.approval = true
		printApprovalHint(r.w, j.Id)
	}
	if j.Phase != palyrav1.JobPhase_JOB_PHASE_QUEUED || j.PendingReason == "" || j.PendingReason == r.last {
		return
	}
	r.last = j.PendingReason
	fmt.Fprintf(r.w, "job %s waiting: %s\n", j.Id, j.PendingReason)
}

// printApprovalHint says how a job waiting for approval goes on. The
// caller may not be allowed to decide (a device, under the default
// policy), so it says who can rather than telling the caller to.
func printApprovalHint(w io.Writer, id string) {
	fmt.Fprintf(w, "job %s waits for approval: an operator (whoever the policy allows job.approve) can approve it with 'palyra job approve %s' or deny it with 'palyra job deny %s --reason …'\n", id, id, id)
}

// waitJob follows a job until it reaches a terminal phase, riding out a
// restarting or silent node (through another, if the client knows one) for
// up to a minute of failures. It ends early with a
// *stillQueuedError when opts.giveUp says so, or when ctx's deadline (a
// --wait-timeout) passes, and with an *interruptedError when ctx is
// cancelled (the user interrupted the command).
func waitJob(ctx context.Context, cl *client.Client, id string, opts waitOpts) (*palyrav1.Job, error) {
	var lastErr error
	var last *palyrav1.Job
	deadline := time.Now().Add(time.Minute)
	tty := isTerminal(opts.progress)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &giveUpTimer{d: opts.giveUp, cancel: cancel}
	defer g.stop()
	reasons := &reasonPrinter{w: opts.progress}
	if cl.Notify == nil && opts.progress != nil {
		cl.Notify = reconnectNotices(opts.progress)
	}
	f := cl.Follow(id)
	defer f.Close()
	ended := func() error {
		if g.fired.Load() {
			return &stillQueuedError{job: last, id: id, unplaceable: true}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return &stillQueuedError{job: last, id: id, after: waitTimeoutOf(ctx)}
		}
		return &interruptedError{id: id, err: ctx.Err()}
	}
	for time.Now().Before(deadline) {
		stream, err := cl.Jobs.WatchJob(wctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
		if err == nil {
			for stream.Receive() {
				f.Delivered()
				prev := last
				last = stream.Msg().Job
				deadline = time.Now().Add(time.Minute)
				if tty {
					switch {
					case last.WaitingForSlot:
						fmt.Fprintf(opts.progress, "job %s placed on %s, waiting there for a free slot (attempt %d)\n", id, last.NodeId, last.Attempt)
					case prev != nil && prev.Phase == last.Phase && prev.Attempt == last.Attempt && prev.RunStartedAtMs == 0 && last.RunStartedAtMs > 0:
						fmt.Fprintf(opts.progress, "job %s started on %s (attempt %d)\n", id, last.NodeId, last.Attempt)
					default:
						fmt.Fprintf(opts.progress, "job %s %s (attempt %d)\n", id, last.Phase.WireName(), last.Attempt)
					}
				}
				reasons.see(last)
				g.see(last)
				if last.Phase.Terminal() {
					stream.Close()
					return last, nil
				}
			}
			err = stream.Err()
			stream.Close()
		}
		if wctx.Err() != nil {
			return nil, ended()
		}
		var ce *connect.Error
		if (errors.As(err, &ce) && ce.Code() == connect.CodeNotFound) || client.CredentialRefused(err) {
			return nil, err
		}
		lastErr = err
		if !f.Broke(wctx, err) {
			return nil, ended()
		}
	}
	return nil, lastErr
}

// waitTimeoutKey carries the --wait-timeout in the context it bounds, so
// the error can name it.
type waitTimeoutKey struct{}

// withWaitTimeout bounds ctx by the --wait-timeout flag, if set.
func withWaitTimeout(c *ucli.Context) (context.Context, context.CancelFunc) {
	d := c.Duration("wait-timeout")
	if d <= 0 {
		return context.WithCancel(c.Context)
	}
	return context.WithTimeout(context.WithValue(c.Context, waitTimeoutKey{}, d), d)
}

func waitTimeoutOf(ctx context.Context) time.Duration {
	d, _ := ctx.Value(waitTimeoutKey{}).(time.Duration)
	return d
}

// giveUpAfter is how long --wait waits on a job no node can run before it
// says so, unless --wait-timeout asks to wait longer: long enough for a
// node that just started to gossip what it offers.
const giveUpAfter = 4 * time.Second

func giveUpFor(c *ucli.Context) time.Duration {
	if c.IsSet("wait-timeout") {
		return 0
	}
	return giveUpAfter
}

func jobGet(c *ucli.Context) error {
	id, err := oneArg(c, "job id")
	if err != nil {
		return err
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Jobs.GetJob(c.Context, connect.NewRequest(&palyrav1.GetJobRequest{Id: id, Stale: staleRead(c)}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	if a := resp.Msg.Array; a != nil {
		if c.Bool("json") {
			return writeJSON(c.App.Writer, toArrayJSON(a))
		}
		printArray(c.App.Writer, a)
		return nil
	}
	j := resp.Msg.Job
	if c.Bool("json") {
		return writeJSON(c.App.Writer, toJobJSON(j))
	}
	printJob(c.App.Writer, j)
	return nil
}

// constraintsText is a job's label constraints on one line, sorted:
// "gpu=yes, zone=eu".
func constraintsText(c map[string]string) string {
	cs := make([]string, 0, len(c))
	for k, val := range c {
		cs = append(cs, k+"="+val)
	}
	slices.Sort(cs)
	return printableText(strings.Join(cs, ", "))
}

// attemptText is one earlier attempt on a line: "1 on n-1a2b, placed
// 12:00:01.200, ended 12:00:03.400: requeued: worker n-1a2b is dead".
func attemptText(a attemptJSON) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d on %s", a.Attempt, a.NodeID)
	if a.PlacedAt != "" {
		fmt.Fprintf(&b, ", placed %s", a.PlacedAt)
	}
	if a.EndedAt != "" {
		fmt.Fprintf(&b, ", ended %s", a.EndedAt)
	}
	b.WriteString(": " + a.Code)
	if a.Reason != "" {
		b.WriteString(": " + printableText(a.Reason))
	}
	return b.String()
}

func printJob(w io.Writer, j *palyrav1.Job) {
	v := toJobJSON(j)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// A queued job that ran before (re-queued off a dead or removed node,
	// or restored from a snapshot) keeps its last placement: say it is
	// the last one, not where the job is.
	nodeText, placedLabel := v.NodeID, "placed"
	if v.Phase == "queued" && v.NodeID != "" {
		nodeText, placedLabel = "none yet (the last attempt was placed on "+v.NodeID+")", "last placed"
	}
	fmt.Fprintf(tw, "id\t%s\nkind\t%s\nphase\t%s\nattempt\t%d\nnode\t%s\nsubmitter\t%s\n", v.ID, v.Kind, v.Phase, v.Attempt, nodeText, v.Submitter)
	if v.ModuleSHA256 != "" {
		fmt.Fprintf(tw, "module\tsha256:%s\n", v.ModuleSHA256)
	}
	if v.Deterministic {
		fmt.Fprintf(tw, "mode\tdeterministic\n")
	}
	fmt.Fprintf(tw, "limits\t%s\n", jobLimitsText(j, v))
	if v.FuelUsed > 0 {
		fmt.Fprintf(tw, "fuel used\t%s of %s\n", groupDigits(v.FuelUsed), groupDigits(v.Fuel))
	}
	if v.Priority != 0 {
		fmt.Fprintf(tw, "priority\t%d\n", v.Priority)
	}
	if len(v.Constraints) > 0 {
		fmt.Fprintf(tw, "constraints\t%s\n", constraintsText(v.Constraints))
	}
	if v.IdempotencyKey != "" {
		fmt.Fprintf(tw, "idempotency key\t%s\n", printableText(v.IdempotencyKey))
	}
	fmt.Fprintf(tw, "submitted\t%s\n", v.SubmittedAt)
	if v.PlacedAt != "" {
		fmt.Fprintf(tw, "%s\t%s\n", placedLabel, v.PlacedAt)
	}
	if v.StartedAt != "" { // only once a result or the worker says when (startedAt)
		fmt.Fprintf(tw, "started\t%s\n", v.StartedAt)
	}
	if v.WaitingForSlot {
		fmt.Fprintf(tw, "waiting\tfor a free slot on %s (a worker takes placements ahead of its slots)\n", v.NodeID)
	}
	if v.FinishedAt != "" {
		fmt.Fprintf(tw, "finished\t%s\n", v.FinishedAt)
	}
	if v.DeadlineAt != "" {
		fmt.Fprintf(tw, "deadline\t%s\n", v.DeadlineAt)
	}
	if v.PendingReason != "" && v.Phase == "queued" {
		fmt.Fprintf(tw, "waiting\t%s\n", v.PendingReason)
	}
	// What an approver needs to see (it was in --json only): the tool,
	// the grants the run asks for, why it waits, and the hooks' notes.
	if v.SkillID != "" {
		fmt.Fprintf(tw, "skill\t%s/%s\n", v.SkillID, v.SkillTool)
	}
	if v.HookID != "" {
		fmt.Fprintf(tw, "hook\t%s\n", v.HookID)
	}
	var grants []string
	if len(v.AllowHosts) > 0 {
		grants = append(grants, "hosts "+strings.Join(v.AllowHosts, ", "))
	}
	if v.AllowPrivate {
		grants = append(grants, "private addresses")
	}
	if len(v.SecretNames) > 0 {
		grants = append(grants, "secrets "+strings.Join(v.SecretNames, ", "))
	}
	if v.KVPrefix != "" {
		grants = append(grants, "key-value prefix "+v.KVPrefix)
	}
	if len(grants) > 0 {
		fmt.Fprintf(tw, "grants\t%s\n", strings.Join(grants, "; "))
	}
	for _, a := range v.Annotations {
		fmt.Fprintf(tw, "note\t%s\n", a)
	}
	if v.Phase == "waiting_for_approval" {
		fmt.Fprintf(tw, "approval\tneeded: palyra job approve %s, or palyra job deny %s --reason TEXT\n", v.ID, v.ID)
	}
	if v.DecidedBy != "" {
		verdict := "approved"
		if v.Error != nil && strings.Contains(v.Error.Message, "denied by") {
			verdict = "denied"
		}
		if v.DecisionReason != "" {
			verdict += ": " + v.DecisionReason
		}
		fmt.Fprintf(tw, "decided\t%s by %s at %s\n", verdict, v.DecidedBy, v.DecidedAt)
	}
	if v.MaxRetries > 0 {
		fmt.Fprintf(tw, "retries\t%d of %d used\n", v.RetriesUsed, v.MaxRetries)
	}
	for i, a := range v.EarlierAttempts {
		label := ""
		if i == 0 {
			label = "earlier attempts"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, attemptText(a))
	}
	if v.ExitCode != nil {
		fmt.Fprintf(tw, "exit code\t%d\n", *v.ExitCode)
	}
	if v.Error != nil {
		fmt.Fprintf(tw, "error\t%s: %s\n", v.Error.Code, v.Error.Message)
		if v.Error.Hint != "" {
			fmt.Fprintf(tw, "hint\t%s\n", v.Error.Hint)
		}
	}
	for i, a := range v.Artifacts {
		label := ""
		if i == 0 {
			label = "artifacts"
		}
		fmt.Fprintf(tw, "%s\t%s (%s, %d bytes; palyra job artifact %s %s -o FILE)\n", label, a.Name, a.MediaType, a.Size, v.ID, a.Name)
	}
	tw.Flush()
	if v.OutputBase64 != "" {
		fmt.Fprintf(w, "--- output: %d bytes, not text (with --json: output_base64)\n", v.OutputSize)
	}
	if v.StderrBase64 != "" {
		fmt.Fprintf(w, "--- stderr: %d bytes, not text (with --json: stderr_base64)\n", v.StderrSize)
	}
	heading := "--- output"
	if vals, failed := partialValues(j); failed {
		heading, v.Output = "--- "+partialHeading, string(vals)
	}
	if isTerminal(w) {
		// A job's output shown among its fields is data, not commands for
		// the terminal (a trial: anyone's job could clear the screen or
		// retitle the window of whoever ran 'job get'). --wait and 'job
		// logs' print it raw, as the job's own stream.
		v.Output, v.Stderr = terminalSafe(v.Output), terminalSafe(v.Stderr)
	}
	if v.Output != "" {
		fmt.Fprintf(w, "%s\n%s", heading, v.Output)
		if v.Output[len(v.Output)-1] != '\n' {
			fmt.Fprintln(w)
		}
	}
	if v.Stderr != "" {
		fmt.Fprintf(w, "--- stderr\n%s", v.Stderr)
		if v.Stderr[len(v.Stderr)-1] != '\n' {
			fmt.Fprintln(w)
		}
	}
}

// terminalSafe shows the control characters of s but newline and tab as
// escapes (\x1b), so printing it cannot drive a terminal.
func terminalSafe(s string) string {
	if strings.IndexFunc(s, terminalControl) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if terminalControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func terminalControl(r rune) bool {
	return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f)
}

// jobLimitsText is a job's limits on one line: "timeout 30s, memory 64.0
// MiB, fuel 10,000,000,000 (default), max output 1.0 MiB" (a browser job
// has no memory or fuel limit of its own).
func jobLimitsText(j *palyrav1.Job, v jobJSON) string {
	parts := []string{"timeout " + (time.Duration(v.TimeoutMS) * time.Millisecond).String()}
	if j.Wasm != nil {
		if v.MemoryBytes > 0 {
			parts = append(parts, "memory "+sizeText(v.MemoryBytes))
		}
		fuel := "fuel " + groupDigits(v.Fuel)
		if j.Wasm.Fuel == 0 {
			fuel += " (default)"
		}
		parts = append(parts, fuel)
	}
	return strings.Join(append(parts, "max output "+sizeText(v.MaxOutputBytes)), ", ")
}

// groupDigits writes n with thousands separators: 10,000,000,000.
func groupDigits(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// maxListLimit is the most jobs a node returns in one page of ListJobs.
const maxListLimit = 1000

func jobList(c *ucli.Context) error {
	if n := c.Uint("limit"); n > maxListLimit {
		return usageErr("--limit %d: a page holds at most %d jobs; use --limit %d and page on with the --after ID printed after each page", n, maxListLimit, maxListLimit)
	}
	if c.IsSet("limit") && c.Uint("limit") == 0 {
		return usageErr("--limit 0: a page holds 1 to %d jobs (default 100)", maxListLimit)
	}
	if c.Bool("arrays") {
		return jobListArrays(c)
	}
	var ph palyrav1.JobPhase
	if s := c.String("phase"); s != "" {
		p, err := palyrav1.ParseJobPhase(s)
		if err != nil {
			return usageErr("--phase: %v", err)
		}
		ph = p
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	req := &palyrav1.ListJobsRequest{
		Phase: ph, Limit: uint32(c.Uint("limit")), AfterId: c.String("after"), Stale: staleRead(c), NodeId: c.String("node"),
		ArrayId: c.String("array"), OldestFirst: c.Bool("oldest-first")}
	resp, err := cl.Jobs.ListJobs(c.Context, connect.NewRequest(req))
	if id, _, ok := strings.Cut(req.AfterId, "@"); ok && connect.CodeOf(err) == connect.CodeNotFound {
		// A node older than ID@INDEX cursors takes it for an id it does
		// not hold: ask again with the id alone (refused as before if that
		// job was pruned).
		req.AfterId = id
		resp, err = cl.Jobs.ListJobs(c.Context, connect.NewRequest(req))
	}
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	if c.Bool("json") {
		out := struct {
			Jobs        []listJobJSON `json:"jobs"`
			NextAfterID string        `json:"next_after_id,omitempty"` // the last job's id, as before
			NextCursor  string        `json:"next_cursor,omitempty"`   // ID@INDEX: goes on past a pruned job
		}{Jobs: []listJobJSON{}, NextAfterID: resp.Msg.NextAfterId, NextCursor: nextCursor(resp.Msg)}
		for _, j := range resp.Msg.Jobs {
			out.Jobs = append(out.Jobs, listJobJSON{jobJSON: toJobJSON(j)})
		}
		return writeJSON(c.App.Writer, out)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tPHASE\tATTEMPT\tNODE\tSUBMITTED\tERROR")
	for _, j := range resp.Msg.Jobs {
		v := toJobJSON(j)
		errText := ""
		if v.Error != nil {
			errText = v.Error.Code
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", v.ID, v.Kind, v.Phase, v.Attempt, listNode(j), v.SubmittedAt, errText)
	}
	tw.Flush()
	if len(resp.Msg.Jobs) == 0 {
		// A header alone read as a failure to list; say what was empty.
		what := "no jobs"
		if c.String("after") != "" {
			what = "no more jobs"
		} else if c.String("phase") != "" || c.String("node") != "" || c.String("array") != "" {
			what = "no jobs match"
		}
		fmt.Fprintln(c.App.ErrWriter, what)
	}
	if note := tasksNote(resp.Msg.Jobs); note != "" && c.String("array") == "" {
		fmt.Fprintln(c.App.ErrWriter, note)
	}
	if next := nextCursor(resp.Msg); next != "" {
		fmt.Fprintf(c.App.ErrWriter, "more jobs: %s\n", nextPageCommand(c, next))
	}
	return nil
}

// nextCursor is the next page's cursor: ID@INDEX, which goes on past a
// job pruned meanwhile, or from an older node the bare id.
func nextCursor(r *palyrav1.ListJobsResponse) string {
	if r.NextCursor != "" {
		return r.NextCursor
	}
	return r.NextAfterId
}

// nextPageCommand is the job list command for the page after id, with
// the filters of this one.
func nextPageCommand(c *ucli.Context, id string) string {
	cmd := "palyra job list"
	for _, f := range []string{"phase", "node", "array"} {
		if v := c.String(f); v != "" {
			cmd += " --" + f + " " + v
		}
	}
	if c.IsSet("limit") {
		cmd += fmt.Sprintf(" --limit %d", c.Uint("limit"))
	}
	if c.Bool("oldest-first") {
		cmd += " --oldest-first"
	}
	return cmd + " --after " + id
}

// jobCancel cancels each ID given, in turn. One that fails (not found,
// already ended, not allowed) is reported and the rest are still
// cancelled; the command then exits 1. With --json one ID prints its job
// (or array) object, several print an array of those that were
// cancelled, and each failure is an error object on stderr.
func jobCancel(c *ucli.Context) error {
	ids := c.Args().Slice()
	if len(ids) == 0 {
		return usageErr("%s takes the job id (or several) to cancel", c.Command.HelpName)
	}
	for _, id := range ids {
		if id == "" {
			return usageErr("%s: a job id is empty", c.Command.HelpName)
		}
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	var done []any           // JSON of each one cancelled
	var failures []errorJSON // under --json, each one that was not
	failed := 0
	printDone := func() error {
		if !c.Bool("json") || (len(ids) == 1 && len(done) == 0) {
			return nil
		}
		if len(ids) == 1 {
			return writeJSON(c.App.Writer, done[0])
		}
		return writeJSON(c.App.Writer, nonNil(done))
	}
	for _, id := range ids {
		resp, err := cl.Jobs.CancelJob(c.Context, connect.NewRequest(&palyrav1.CancelJobRequest{Id: id}))
		if err != nil {
			if len(ids) == 1 || interrupted(c) {
				_ = printDone() // those cancelled before the interruption
				if c.Bool("json") && len(failures) > 0 {
					e := cl.Explain(err)
					failures = append(failures, errorJSON{Code: e.Code, Message: e.Message, Hint: withDataDir(c, e.Hint)})
					_ = writeJSON(errJSONWriter(c), map[string]any{"error": errorJSON{Code: "interrupted", Message: "interrupted: the rest were not cancelled"}, "failures": failures})
					return ucli.Exit("", exitInterrupted)
				}
				return fail(c, cl.Explain(err))
			}
			failed++
			e := cl.Explain(err)
			if c.Bool("json") {
				failures = append(failures, errorJSON{Code: e.Code, Message: e.Message, Hint: withDataDir(c, e.Hint)})
			} else if strings.Contains(e.Message, id) {
				fmt.Fprintf(c.App.ErrWriter, "error: %s\n", e.Message)
			} else {
				fmt.Fprintf(c.App.ErrWriter, "error: %s: %s\n", id, e.Message)
			}
			continue
		}
		switch a := resp.Msg.Array; {
		case c.Bool("json") && a != nil:
			done = append(done, toArrayJSON(a))
		case c.Bool("json"):
			done = append(done, toJobJSON(resp.Msg.Job))
		case a != nil:
			fmt.Fprintf(c.App.Writer, "%s cancelled: %s\n", a.Id, countsText(a))
		default:
			fmt.Fprintf(c.App.Writer, "%s %s\n", resp.Msg.Job.Id, resp.Msg.Job.Phase.WireName())
		}
	}
	if err := printDone(); err != nil {
		return err
	}
	if failed > 0 {
		msg := fmt.Sprintf("%d of %d could not be cancelled", failed, len(ids))
		if c.Bool("json") {
			// One JSON document on stderr: the summary, with each failure.
			_ = writeJSON(errJSONWriter(c), map[string]any{"error": errorJSON{Code: "failed", Message: msg}, "failures": failures})
			return ucli.Exit("", exitFailure)
		}
		return ucli.Exit(msg+" (above)", exitFailure)
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// jobWatch prints each change of a job until it ends. A stream broken by
// its node (stopped, restarted, unreachable, silent) is opened again, at
// once through another node when the client knows several (the
// credential's, --addr's, or the cluster's members it learned), then
// every second at most, for up to a minute of failures; stderr says so
// (reconnectNotices). The state the new stream starts with is printed
// only if it changed meanwhile.
func jobWatch(c *ucli.Context) error {
	id, err := oneArg(c, "job id")
	if err != nil {
		return err
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	var last *palyrav1.Job
	retryUntil := time.Now().Add(time.Minute)
	resumed := false
	cl.Notify = reconnectNotices(c.App.ErrWriter)
	f := cl.Follow(id)
	defer f.Close()
	for {
		stream, err := cl.Jobs.WatchJob(c.Context, connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
		if err == nil {
			for stream.Receive() {
				f.Delivered()
				if stream.Msg().Array != nil {
					// A job array: follow it (progress, then outputs) on a
					// stream of its own.
					stream.Close()
					return followArray(c, cl, id, false, taskInputs{})
				}
				if c.IsSet("output-dir") {
					stream.Close()
					return usageErr("--output-dir is for job arrays; %s is a job (its output: 'palyra job get %s')", id, id)
				}
				j := stream.Msg().Job
				if resumed && last != nil && j.Phase == last.Phase && j.Attempt == last.Attempt && j.NodeId == last.NodeId {
					resumed = false
					continue // what the broken stream already showed
				}
				resumed = false
				retryUntil = time.Now().Add(time.Minute) // news: failures count afresh
				prev := last
				last = j
				if err := printWatched(c, last, prev); err != nil {
					stream.Close()
					return err
				}
			}
			err = stream.Err()
			stream.Close()
			if err == nil {
				if last == nil || last.Phase.Terminal() {
					break
				}
				err = errors.New("the node ended the stream before the job ended")
			}
		}
		if interrupted(c) {
			return stoppedFollowing(c, "job", id)
		}
		if last == nil || !watchRetryable(err) || time.Now().After(retryUntil) {
			// Never reached: say why at once (as before); the retries are
			// for a stream that broke after it worked.
			return fail(c, cl.Explain(err))
		}
		resumed = true
		if !f.Broke(c.Context, err) {
			return stoppedFollowing(c, "job", id)
		}
	}
	if last != nil && last.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		return ucli.Exit("", exitFailure)
	}
	return nil
}

// reconnectNotices prints a wait's reconnects on w: on a terminal each
// loss and each resumption as they happen (clearing a progress bar's
// line), else one short line once the wait follows the job again, naming
// the node it lost and the one it goes on through.
func reconnectNotices(w io.Writer) func(client.Notice) {
	tty := isTerminal(w)
	return func(n client.Notice) {
		switch {
		case tty && n.Through != "":
			fmt.Fprintf(w, "\r\033[Kfollowing %s again through %s\n", n.What, n.Through)
		case tty:
			fmt.Fprintf(w, "\r\033[K%s\n", n)
		case n.Through != "":
			fmt.Fprintln(w, n)
		}
	}
}

// watchRetryable: a watch that failed for its node's sake (gone, restarting,
// unreachable) is opened again; one the cluster refused (no such job, not
// allowed, bad request) is not.
func watchRetryable(err error) bool {
	if client.CredentialRefused(err) {
		// Revoked (or expired) meanwhile: the stream was cut, and every
		// node refuses the credential (it retried for a minute, silent).
		return false
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return true
	}
	switch ce.Code() {
	case connect.CodeNotFound, connect.CodePermissionDenied, connect.CodeUnauthenticated,
		connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeResourceExhausted:
		return false
	}
	return true
}

// printWatched prints one state of a watched job: a JSON object per line
// with --json, else a line stamped with when it happened; prev is the
// state printed before it (nil for the first).
func printWatched(c *ucli.Context, j, prev *palyrav1.Job) error {
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(toJobJSON(j))
	}
	at := time.Now()
	running := j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING
	// The worker began a run it had held waiting for a slot: news within
	// the phase, stamped with when the worker says it began.
	began := running && prev != nil && prev.Phase == j.Phase && prev.Attempt == j.Attempt && prev.RunStartedAtMs == 0 && j.RunStartedAtMs > 0
	if began {
		at = time.UnixMilli(j.RunStartedAtMs)
	} else if prev == nil || prev.Phase != j.Phase || prev.Attempt != j.Attempt {
		// A new phase (or the state the watch starts with, which may be
		// long past: a job that ended an hour ago) is stamped with the
		// time the cluster recorded for it; a change within a phase (a
		// new pending reason) has no recorded time and is news.
		if t := phaseSince(j); !t.IsZero() {
			at = t
		}
	}
	if prev != nil {
		// Attempts that ended between the two states (a re-queue and the
		// next placement often commit together: no queued state between).
		told := uint32(0)
		if n := len(prev.EarlierAttempts); n > 0 {
			told = prev.EarlierAttempts[n-1].Attempt
		}
		for _, e := range newlyEnded(j, told) {
			if endedAttempt(j) == e {
				continue // the queued line below says it
			}
			when := strings.Repeat(" ", len("15:04:05.000 "))
			if e.EndedAtMs > 0 {
				when = watchStamp(time.UnixMilli(e.EndedAtMs), time.Now()) + " "
			}
			if _, err := fmt.Fprintf(c.App.Writer, "%s attempt %d on %s ended (%s: %s)\n", when, e.Attempt, e.NodeId, e.Code, printableText(e.Reason)); err != nil {
				return err
			}
		}
	}
	line := fmt.Sprintf("%s  %s  attempt %d", watchStamp(at, time.Now()), j.Phase.WireName(), j.Attempt)
	if e := endedAttempt(j); e != nil {
		// Queued again: say how the attempt before ended, not "on" its node.
		line += fmt.Sprintf(" on %s ended (%s: %s)", e.NodeId, e.Code, printableText(e.Reason))
	} else if j.NodeId != "" {
		line += "  on " + j.NodeId
	}
	if j.PendingReason != "" && j.Phase == palyrav1.JobPhase_JOB_PHASE_QUEUED {
		line += "  (" + j.PendingReason + ")"
	}
	switch {
	case running && j.WaitingForSlot:
		line += "  (placed; waiting there for a free slot)"
	case began:
		line += "  (started: it has its slot)"
	}
	if j.Error != nil {
		line += "  " + j.Error.Code + ": " + j.Error.Message
	}
	_, err := fmt.Fprintln(c.App.Writer, line)
	return err
}

// watchStamp is a watch line's time, UTC to the millisecond, with its date
// when that is not today's (a trial: a job that ended days ago was
// stamped with a bare time of day).
func watchStamp(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if y, m, d := t.Date(); y != now.Year() || m != now.Month() || d != now.Day() {
		return t.Format("2006-01-02 15:04:05.000")
	}
	return t.Format("15:04:05.000")
}

// phaseSince is when j entered its phase, as the cluster recorded it: an
// ended job's end, a running job's placement, a job waiting for its first
// attempt (or for approval) its submission, a job approved its decision;
// zero when the job carries no such time (a job queued again for a retry,
// a paused one).
func phaseSince(j *palyrav1.Job) time.Time {
	ms := int64(0)
	switch {
	case j.Phase.Terminal():
		ms = j.FinishedAtMs
	case j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING:
		ms = j.PlacedAtMs
		if ms == 0 {
			ms = j.StartedAtMs // placed before placed_at_ms was recorded
		}
	case j.Phase == palyrav1.JobPhase_JOB_PHASE_WAITING_FOR_APPROVAL:
		ms = j.SubmittedAtMs
	case j.Phase == palyrav1.JobPhase_JOB_PHASE_QUEUED && j.Attempt == 0 && j.RetriesUsed == 0:
		ms = j.SubmittedAtMs
		if j.DecidedAtMs > 0 {
			ms = j.DecidedAtMs
		}
	case endedAttempt(j) != nil:
		ms = endedAttempt(j).EndedAtMs // queued again when its attempt ended
	}
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// newlyEnded is j's earlier attempts after attempt told, oldest first.
func newlyEnded(j *palyrav1.Job, told uint32) []*palyrav1.JobAttempt {
	var out []*palyrav1.JobAttempt
	for _, e := range j.EarlierAttempts {
		if e.Attempt > told {
			out = append(out, e)
		}
	}
	return out
}

// endedAttempt is, for a job queued again, the attempt that just ended
// (its worker died or stopped, its lease lapsed, its run failed and is
// retried), as the cluster recorded it; nil otherwise.
func endedAttempt(j *palyrav1.Job) *palyrav1.JobAttempt {
	if j.Phase != palyrav1.JobPhase_JOB_PHASE_QUEUED || len(j.EarlierAttempts) == 0 {
		return nil
	}
	if e := j.EarlierAttempts[len(j.EarlierAttempts)-1]; e.Attempt == j.Attempt && j.Attempt > 0 {
		return e
	}
	return nil
}

// listNode is a job's NODE in 'job list': where its attempt runs or ran;
// "-" for a job queued again (the node its last attempt had is in 'job
// get'; a trial read it as where the queued job was).
func listNode(j *palyrav1.Job) string {
	if j.Phase == palyrav1.JobPhase_JOB_PHASE_QUEUED || j.NodeId == "" {
		return "-"
	}
	return j.NodeId
}

func jobLogs(c *ucli.Context) error {
	id, err := oneArg(c, "job id")
	if err != nil {
		return err
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	p := &logPrinter{c: c, enc: json.NewEncoder(c.App.Writer)}
	if !c.Bool("follow") {
		stream, err := cl.Jobs.JobLogs(c.Context, connect.NewRequest(&palyrav1.JobLogsRequest{Id: id}))
		if err == nil {
			err = p.read(stream, nil)
			stream.Close()
		}
		if err != nil {
			if interrupted(c) {
				return stoppedReadingLogs(c, id)
			}
			return fail(c, cl.Explain(err))
		}
		if p.last != nil && !p.wrote && !p.last.Phase.Terminal() && p.last.Phase != palyrav1.JobPhase_JOB_PHASE_RUNNING {
			notStarted(c, cl, id, p.last.Phase)
		}
		if p.last != nil && p.last.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && !c.Bool("json") {
			// The output so far: the job goes on (--json says so in its
			// phase; stdout holds the bytes alone). No output yet: its
			// worker may hold it, waiting for a slot (job get asks it).
			node, waits := "", false
			if !p.wrote {
				node, waits = waitsForSlot(c, cl, id)
			}
			if waits {
				fmt.Fprintf(c.App.ErrWriter, "note: job %s is placed on %s and waits there for a free slot: no output yet; follow it with 'palyra job logs -f %s'\n", id, node, id)
			} else {
				fmt.Fprintf(c.App.ErrWriter, "note: job %s is still running: this is its output so far; follow it with 'palyra job logs -f %s'\n", id, id)
			}
		}
		return nil
	}
	// Following: a stream broken by its node (stopped, restarted, killed,
	// silent) is opened again, through another node first, as job watch
	// does, asking to start where the output received ends (a node older
	// than that request starts from the attempt's first byte, and what was
	// printed already is skipped).
	cl.Notify = reconnectNotices(c.App.ErrWriter)
	f := cl.Follow(id)
	defer f.Close()
	if err := waitStarted(c, cl, f, id); err != nil {
		var sq *stillQueuedError
		if errors.As(err, &sq) {
			return ucli.Exit(sq.Error(), exitFailure)
		}
		if interrupted(c) {
			return stoppedReadingLogs(c, id)
		}
		return fail(c, cl.Explain(err))
	}
	retryUntil := time.Now().Add(time.Minute)
	for {
		stream, err := cl.Jobs.JobLogs(c.Context, connect.NewRequest(p.request(id)))
		if err == nil {
			err = p.read(stream, func() { f.Delivered(); retryUntil = time.Now().Add(time.Minute) })
			stream.Close()
			if err == nil {
				if p.last != nil && p.last.Phase.Terminal() {
					break
				}
				err = errors.New("the node ended the stream before the job ended")
			}
		}
		if interrupted(c) {
			return stoppedReadingLogs(c, id)
		}
		if !watchRetryable(err) || time.Now().After(retryUntil) {
			return fail(c, cl.Explain(err))
		}
		p.resume()
		if !f.Broke(c.Context, err) {
			return stoppedReadingLogs(c, id)
		}
	}
	if ph := p.last.Phase; ph != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		p.endLines()
		return ucli.Exit(fmt.Sprintf("job %s %s (see 'palyra job get %s')", id, ph.WireName(), id), exitFailure)
	}
	return nil
}

// logPrinter prints the messages of job logs streams: stdout to stdout,
// stderr and notes to stderr (or JSON lines). It keeps where the current
// attempt's output received so far ends, so a stream opened again after
// its node broke it starts there (request) and prints only what is new.
type logPrinter struct {
	c       *ucli.Context
	enc     *json.Encoder
	last    *palyrav1.JobLogsResponse
	wrote   bool     // some output was printed
	attempt uint32   // the attempt whose output is printed
	at      [2]int64 // where its stdout and stderr received so far end (bytes dropped for a slow reader count)
	printed [2]int64 // its stdout and stderr bytes printed so far
	skip    [2]int64 // bytes a reopened stream from an older node repeats, still to drop
	raw     [2]int64 // bytes the current stream from an older node sent (from the attempt's first)
	resumed bool     // the current stream was opened again
	// outEnd, errEnd: the last byte printed on stdout, stderr (0: none).
	outEnd, errEnd byte
}

// read prints a stream's messages until it ends; delivered, if set, is
// called on each.
func (p *logPrinter) read(stream *connect.ServerStreamForClient[palyrav1.JobLogsResponse], delivered func()) error {
	for stream.Receive() {
		if delivered != nil {
			delivered()
		}
		if err := p.print(stream.Msg()); err != nil {
			return err
		}
	}
	return stream.Err()
}

func (p *logPrinter) print(m *palyrav1.JobLogsResponse) error {
	p.last = m
	if m.Attempt != p.attempt {
		if p.resumed && m.Note == "" && p.printed != [2]int64{} {
			// The node that said so is gone: say it here.
			m.Note = fmt.Sprintf("attempt %d ended; attempt %d's output follows", p.attempt, m.Attempt)
		}
		p.attempt, p.at, p.printed, p.skip, p.raw = m.Attempt, [2]int64{}, [2]int64{}, [2]int64{}, [2]int64{}
	}
	var out, errOut []byte
	if m.Resumable {
		out, errOut = p.fresh(0, m.Stdout, m.StdoutEnd), p.fresh(1, m.Stderr, m.StderrEnd)
	} else {
		// An older node starts again from the attempt's first byte: the
		// position is what it sent, which after a gap (bytes dropped for a
		// slow reader) lags what was received before until it catches up.
		p.raw[0] += int64(len(m.Stdout))
		p.raw[1] += int64(len(m.Stderr))
		out, errOut = p.drop(0, m.Stdout), p.drop(1, m.Stderr)
		p.at[0], p.at[1] = max(p.at[0], p.raw[0]), max(p.at[1], p.raw[1])
	}
	p.printed[0] += int64(len(out))
	p.printed[1] += int64(len(errOut))
	if len(out) > 0 || len(errOut) > 0 {
		p.wrote = true
	}
	if p.c.Bool("json") {
		if len(out) == 0 && len(errOut) == 0 && m.Note == "" && m.Phase == palyrav1.JobPhase_JOB_PHASE_UNSPECIFIED {
			return nil
		}
		v := logJSON{Stdout: string(out), Stderr: string(errOut), Note: m.Note, Attempt: m.Attempt}
		if m.Phase != palyrav1.JobPhase_JOB_PHASE_UNSPECIFIED {
			v.Phase = m.Phase.WireName()
		}
		return p.enc.Encode(v)
	}
	w, ew := p.c.App.Writer, p.c.App.ErrWriter
	if m.Note != "" {
		if p.errEnd != 0 && p.errEnd != '\n' {
			fmt.Fprintln(ew)
		}
		fmt.Fprintf(ew, "[palyra] %s\n", m.Note)
		p.errEnd = '\n'
	}
	if len(out) > 0 {
		w.Write(out)
		p.outEnd = out[len(out)-1]
	}
	if len(errOut) > 0 {
		ew.Write(errOut)
		p.errEnd = errOut[len(errOut)-1]
	}
	return nil
}

// fresh returns what b (stream i's next bytes, ending at end in the
// attempt's output, as a node that honours resumption says) holds past
// what was received already, and notes that the output received ends at
// end.
func (p *logPrinter) fresh(i int, b []byte, end int64) []byte {
	if n := p.at[i] - (end - int64(len(b))); n > 0 {
		b = b[min(n, int64(len(b))):]
	}
	p.at[i] = max(p.at[i], end)
	p.skip[i] = 0 // this node started where asked: nothing to drop by count
	return b
}

// drop removes from b (stream i's next bytes, from a node older than
// resumption) what a reopened stream repeats.
func (p *logPrinter) drop(i int, b []byte) []byte {
	n := min(p.skip[i], int64(len(b)))
	p.skip[i] -= n
	return b[n:]
}

// request asks to follow job id from where the output received ends. A
// node older than resumption ignores the offsets and starts again from
// the attempt's first byte: its messages say so (not Resumable), and
// resume has readied the count of what to skip. (After a gap, when the
// worker dropped bytes a slow reader had not read, that count is short by
// the dropped bytes, and a few lines may be printed twice.)
func (p *logPrinter) request(id string) *palyrav1.JobLogsRequest {
	return &palyrav1.JobLogsRequest{Id: id, Follow: true, Attempt: p.attempt, StdoutOffset: p.at[0], StderrOffset: p.at[1]}
}

// resume prepares for a stream opened again: should a node older than
// resumption serve it, it repeats what was printed.
func (p *logPrinter) resume() {
	p.skip, p.raw, p.resumed = p.printed, [2]int64{}, true
}

// endLines ends the lines the output left open, so a failure line that
// follows starts a line of its own (stdout and stderr may be one
// terminal, or one pipe with 2>&1).
func (p *logPrinter) endLines() {
	if p.c.Bool("json") {
		return
	}
	if p.outEnd != 0 && p.outEnd != '\n' {
		fmt.Fprintln(p.c.App.Writer)
	}
	if p.errEnd != 0 && p.errEnd != '\n' {
		fmt.Fprintln(p.c.App.ErrWriter)
	}
}

// waitStarted follows a job that has not started (queued, waiting for
// approval) until it runs or ends, printing its pending reason on stderr
// each time it changes, as --wait does: its logs stream says nothing
// until then. Like --wait, it gives up with a *stillQueuedError once no
// node in the cluster has been able to run the job for giveUpAfter. It
// rides out a broken stream as job watch does.
func waitStarted(c *ucli.Context, cl *client.Client, f *client.Follower, id string) error {
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	g := &giveUpTimer{d: giveUpFor(c), cancel: cancel}
	defer g.stop()
	reasons := &reasonPrinter{w: c.App.ErrWriter}
	retryUntil := time.Now().Add(time.Minute)
	var last *palyrav1.Job
	for {
		stream, err := cl.Jobs.WatchJob(ctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
		if err == nil {
			for stream.Receive() {
				f.Delivered()
				j := stream.Msg().Job
				if j != nil && j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && j.WaitingForSlot {
					// Placed, but its worker holds it until a slot frees:
					// no output until then, which the logs stream delivers
					// as it comes (it is not told of the start itself).
					fmt.Fprintf(c.App.ErrWriter, "job %s is placed on %s and waits there for a free slot (attempt %d); its output follows once it starts\n", id, j.NodeId, j.Attempt)
				}
				if j == nil || j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING || j.Phase.Terminal() {
					// Running or ended (or an array, which JobLogs refuses
					// with its own message).
					stream.Close()
					return nil
				}
				retryUntil = time.Now().Add(time.Minute)
				last = j
				reasons.see(j)
				g.see(j)
			}
			err = stream.Err()
			stream.Close()
			if err == nil {
				return nil
			}
		}
		if g.fired.Load() {
			return &stillQueuedError{job: last, id: id, unplaceable: true}
		}
		if interrupted(c) || !watchRetryable(err) || time.Now().After(retryUntil) {
			return err
		}
		if !f.Broke(ctx, err) {
			if g.fired.Load() {
				return &stillQueuedError{job: last, id: id, unplaceable: true}
			}
			return c.Context.Err()
		}
	}
}

// notStarted says on stderr why 'job logs' of a job that has not run yet
// printed nothing: its phase, and why it waits.
// waitsForSlot reports whether running job id waits on its worker (node)
// for a slot, as 'job get' says (false when that cannot be told).
func waitsForSlot(c *ucli.Context, cl *client.Client, id string) (node string, waits bool) {
	resp, err := cl.Jobs.GetJob(c.Context, connect.NewRequest(&palyrav1.GetJobRequest{Id: id, Stale: staleRead(c)}))
	if err != nil || resp.Msg.Job == nil {
		return "", false
	}
	j := resp.Msg.Job
	return j.NodeId, j.Phase == palyrav1.JobPhase_JOB_PHASE_RUNNING && j.WaitingForSlot
}

func notStarted(c *ucli.Context, cl *client.Client, id string, phase palyrav1.JobPhase) {
	msg := fmt.Sprintf("job %s is %s: no output yet", id, phase.WireName())
	resp, err := cl.Jobs.GetJob(c.Context, connect.NewRequest(&palyrav1.GetJobRequest{Id: id, Stale: staleRead(c)}))
	if err == nil && resp.Msg.Job != nil {
		j := resp.Msg.Job
		switch {
		case j.Phase == palyrav1.JobPhase_JOB_PHASE_QUEUED && j.PendingReason != "":
			msg += "; pending: " + j.PendingReason
		case j.Phase == palyrav1.JobPhase_JOB_PHASE_WAITING_FOR_APPROVAL:
			msg += fmt.Sprintf("; it waits for approval ('palyra job approve %s')", id)
		}
	}
	fmt.Fprintf(c.App.ErrWriter, "%s (follow it with 'palyra job logs -f %s')\n", msg, id)
}

// logJSON is one message of 'job logs --json', a line of its own.
type logJSON struct {
	Stdout  string `json:"stdout,omitempty"`
	Stderr  string `json:"stderr,omitempty"`
	Note    string `json:"note,omitempty"`
	Attempt uint32 `json:"attempt,omitempty"`
	Phase   string `json:"phase,omitempty"`
}

// stoppedReadingLogs answers an interrupted 'job logs'.
func stoppedReadingLogs(c *ucli.Context, id string) error {
	return failWith(c, &client.Error{Code: "interrupted",
		Message: fmt.Sprintf("interrupted: stopped reading the logs of job %s; the job goes on (interrupting this command does not cancel it)", id),
		Hint:    fmt.Sprintf("follow them again with 'palyra job logs -f %s', or see the job with 'palyra job get %s'", id, id)}, exitInterrupted)
}

// navigateHosts lists the hosts a browser script's navigate steps name, to
// grant with the job as 'job browse' grants its URL's: naming a page to
// load is asking to reach it. A script the node will refuse anyway grants
// nothing here.
func navigateHosts(script []byte) []string {
	if len(script) == 0 {
		return nil
	}
	var s struct {
		Steps []struct {
			Action string `json:"action"`
			URL    string `json:"url"`
		} `json:"steps"`
	}
	if json.Unmarshal(script, &s) != nil {
		return nil
	}
	var hosts []string
	for _, st := range s.Steps {
		if st.Action != "navigate" {
			continue
		}
		if u, err := url.Parse(st.URL); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && !slices.Contains(hosts, u.Hostname()) {
			hosts = append(hosts, u.Hostname())
		}
	}
	return hosts
}
