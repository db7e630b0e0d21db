package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// Job arrays: one task per input, run with the same module and settings.

// readInputLines splits r into one input per line, without the line's
// newline (nor a carriage return before it); a final newline does not
// start another task. It reads at most maxInputsRead bytes: the array's
// inputs are bounded (palyrav1.MaxArrayInputBytes, checked before sending).
// A line over the per-task limit is a *lineSizeError naming it.
func readInputLines(r io.Reader) ([][]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInputsRead+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxInputsRead {
		return nil, fmt.Errorf("more than %s of inputs; an array takes at most %s", client.SizeOf(maxInputsRead, 0), client.SizeOf(palyrav1.MaxArrayInputBytes, 0))
	}
	if len(data) == 0 {
		return nil, nil
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	lines := bytes.Split(data, []byte("\n"))
	for i, l := range lines {
		lines[i] = bytes.TrimSuffix(l, []byte("\r"))
		if len(lines[i]) > palyrav1.MaxInputBytes {
			return nil, &lineSizeError{line: i + 1, size: len(lines[i])}
		}
	}
	return lines, nil
}

// lineSizeError: a line of --inputs over the per-task input limit.
type lineSizeError struct{ line, size int }

func (e *lineSizeError) Error() string {
	return fmt.Sprintf("line %d is %s; the limit is %s per task", e.line, client.SizeOf(e.size, palyrav1.MaxInputBytes), client.SizeOf(palyrav1.MaxInputBytes, 0))
}

// maxInputsRead bounds what --inputs reads: the array limit plus room for
// the newlines, so a huge file or an endless stream gets a clear error and
// not an out-of-memory crash.
const maxInputsRead = 2 * palyrav1.MaxArrayInputBytes

// readInputDir reads one input per regular file in dir (symlinks to
// regular files included), in name order, and returns the names too.
// Subdirectories, other special files and hidden files (".name": editor
// and OS droppings such as .DS_Store) are skipped; skipped counts the
// subdirectories and special files, which are not hidden and may have been
// meant as input. A file over the per-task limit, or files over the
// array's limit, are refused by name before they are read whole.
func readInputDir(dir string) (inputs [][]byte, names []string, skipped inputDirSkips, err error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, nil, skipped, err
	}
	total := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p) // follows symlinks
		if err != nil {
			return nil, nil, skipped, fmt.Errorf("%s: %w (a dangling symlink? remove it or point it at a file)", e.Name(), err)
		}
		switch {
		case st.IsDir():
			skipped.dirs++
			continue
		case !st.Mode().IsRegular():
			skipped.special++
			continue
		}
		if st.Size() > palyrav1.MaxInputBytes {
			return nil, nil, skipped, fmt.Errorf("%s is %w per task", e.Name(), &sizeError{size: int(st.Size()), limit: palyrav1.MaxInputBytes})
		}
		if total += int(st.Size()); total > palyrav1.MaxArrayInputBytes {
			return nil, nil, skipped, fmt.Errorf("the files up to %s total more than %s, the limit per array; split them into several directories", e.Name(), client.SizeOf(palyrav1.MaxArrayInputBytes, 0))
		}
		b, err := readBounded(p, palyrav1.MaxInputBytes)
		if err != nil {
			return nil, nil, skipped, fmt.Errorf("%s: %w", e.Name(), err)
		}
		inputs, names = append(inputs, b), append(names, e.Name())
	}
	return inputs, names, skipped, nil
}

// inputDirSkips counts what --input-dir skipped that was not hidden.
type inputDirSkips struct{ dirs, special int }

// note is the line --input-dir prints on stderr about them, or "".
func (s inputDirSkips) note(dir string) string {
	var parts []string
	switch s.dirs {
	case 0:
	case 1:
		parts = append(parts, "1 subdirectory")
	default:
		parts = append(parts, fmt.Sprintf("%d subdirectories", s.dirs))
	}
	switch s.special {
	case 0:
	case 1:
		parts = append(parts, "1 special file (not a regular file)")
	default:
		parts = append(parts, fmt.Sprintf("%d special files (not regular files)", s.special))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("note: --input-dir %s: skipped %s; a task is one regular file directly in the directory, and subdirectories are not read", dir, strings.Join(parts, " and "))
}

// readBounded reads a file, or stdin for "-", refusing (without reading it
// whole) one larger than limit bytes.
func readBounded(path string, limit int) ([]byte, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > int64(limit) {
			return nil, &sizeError{size: int(st.Size()), limit: limit}
		}
		r = f
	}
	return readAllBounded(r, limit)
}

// readAllBounded reads r up to limit bytes; more is a *sizeError.
func readAllBounded(r io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, &sizeError{size: -1, limit: limit}
	}
	return b, nil
}

// readFailure says why what (module, input, script) could not be read from
// path: over its limit ("input is 2.0 MiB; the limit is 1.0 MiB (big.bin)"),
// or the read's own error.
func readFailure(what, path string, err error) string {
	var se *sizeError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s is %s (%s)", what, se, path)
	}
	return fmt.Sprintf("cannot read %s: %v", what, err)
}

// sizeError: a file or stream over a limit (size -1: a stream, known only
// to be longer).
type sizeError struct{ size, limit int }

func (e *sizeError) Error() string {
	if e.size < 0 {
		return "more than " + client.SizeOf(e.limit, 0) + ", the limit"
	}
	return client.SizeOf(e.size, e.limit) + "; the limit is " + client.SizeOf(e.limit, 0)
}

// arrayInputs reads --inputs or --input-dir; nil when neither is given.
// For --input-dir it also returns the file names, task i's first.
func arrayInputs(c *ucli.Context) ([][]byte, []string, error) {
	switch {
	case !c.IsSet("inputs") && !c.IsSet("input-dir"):
		return nil, nil, nil
	case c.IsSet("inputs") && c.IsSet("input-dir"):
		return nil, nil, usageErr("use either --inputs or --input-dir, not both")
	case c.IsSet("input") || c.IsSet("input-file"):
		return nil, nil, usageErr("--inputs and --input-dir give each task its own input; drop --input/--input-file")
	case c.IsSet("browser"):
		return nil, nil, usageErr("job arrays run wasm modules; submit browser jobs one at a time")
	}
	if dir := c.String("input-dir"); c.IsSet("input-dir") {
		// A path that cannot be read exits 1, as a --wasm or --input-file
		// that cannot be; a file where a directory is wanted, or an empty
		// directory, is a wrong argument (exit 2).
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			msg := fmt.Sprintf("--input-dir %s is not a directory", dir)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				msg = fmt.Sprintf("--input-dir %s does not exist", dir)
			case err != nil:
				msg = fmt.Sprintf("--input-dir: %v", err)
			}
			code := exitUsage
			if err != nil {
				code = exitFailure
			}
			return nil, nil, failWith(c, &client.Error{Code: "invalid_argument", Message: msg, Hint: "pass a directory holding one file per task (hidden files are skipped); for one task per line of a file, use --inputs FILE"}, code)
		}
		in, names, skipped, err := readInputDir(dir)
		if err != nil {
			hint := "pass a directory holding one file per task (hidden files are skipped)"
			var se *sizeError
			if errors.As(err, &se) {
				hint = "pass less input per task (split the file), or have the task fetch its data"
			}
			return nil, nil, fail(c, &client.Error{Code: "invalid_argument", Message: fmt.Sprintf("--input-dir %s: %v", dir, err), Hint: hint})
		}
		if note := skipped.note(dir); note != "" {
			fmt.Fprintln(c.App.ErrWriter, note)
		}
		if len(in) == 0 {
			return nil, nil, usageErr("--input-dir %s holds no regular files: nothing to run", dir)
		}
		return in, names, nil
	}
	var r io.Reader = c.App.Reader
	from := "stdin"
	if name := c.String("inputs"); name != "-" {
		f, err := os.Open(name)
		if err != nil { // cannot be read: exit 1, as for --wasm (see --input-dir)
			return nil, nil, fail(c, &client.Error{Code: "invalid_argument", Message: fmt.Sprintf("cannot read --inputs: %v", err), Hint: "pass a file with one input per line ('-' for stdin)"})
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return nil, nil, failWith(c, &client.Error{Code: "invalid_argument", Message: fmt.Sprintf("--inputs %s is a directory", name),
				Hint: fmt.Sprintf("for one task per file in it, use --input-dir %s; --inputs takes a file with one input per line", name)}, exitUsage)
		}
		r, from = f, name
	}
	in, err := readInputLines(r)
	var lse *lineSizeError
	if errors.As(err, &lse) {
		return nil, nil, fail(c, &client.Error{Code: "invalid_argument", Message: fmt.Sprintf("--inputs: line %d of %s is %s; the limit is %s per task",
			lse.line, from, client.SizeOf(lse.size, palyrav1.MaxInputBytes), client.SizeOf(palyrav1.MaxInputBytes, 0)),
			Hint: "pass less input per task (one task per line), or have the task fetch its data; for inputs with newlines, use --input-dir with one file per task"})
	}
	if err != nil {
		return nil, nil, fail(c, &client.Error{Code: "invalid_argument", Message: fmt.Sprintf("cannot read --inputs: %v", err)})
	}
	if len(in) == 0 {
		return nil, nil, usageErr("--inputs %s is empty: give one input per line", c.String("inputs"))
	}
	if note := emptyLinesNote(in, from); note != "" {
		fmt.Fprintln(c.App.ErrWriter, note)
	}
	return in, nil, nil
}

// emptyLinesNote says which lines of an --inputs source are empty: each
// is a task with an empty input, which a blank line an editor left at the
// end made without a word.
func emptyLinesNote(in [][]byte, from string) string {
	var lines []string
	n := 0
	for i, l := range in {
		if len(l) == 0 {
			n++
			if len(lines) < 5 {
				lines = append(lines, strconv.Itoa(i+1))
			}
		}
	}
	if n == 0 {
		return ""
	}
	which := "line " + strings.Join(lines, ", ")
	if len(lines) > 1 {
		which = "lines " + strings.Join(lines, ", ")
	}
	if n > len(lines) {
		which += fmt.Sprintf(" and %d more", n-len(lines))
	}
	return fmt.Sprintf("note: %d empty line(s) of %s (%s) each make a task with an empty input; remove them if they are not meant as tasks", n, from, which)
}

// arrayJSON is the stable JSON form of a job array.
type arrayJSON struct {
	ID      string            `json:"id"`
	Size    uint32            `json:"size"`
	Counts  map[string]uint64 `json:"counts"`
	Done    bool              `json:"done"`
	EndedAt string            `json:"ended_at,omitempty"`
	// PendingReason: why its first queued task waits (job get).
	PendingReason string  `json:"pending_reason,omitempty"`
	Template      jobJSON `json:"template"`
}

func toArrayJSON(a *palyrav1.JobArray) arrayJSON {
	tmpl := toJobJSON(a.Template)
	// A template is the tasks' settings, never run: it has no phase (its
	// tasks' phases are the counts).
	tmpl.Phase = ""
	return arrayJSON{ID: a.Id, Size: a.Size, Counts: a.Counts, Done: a.Done, EndedAt: msTime(a.EndedAtMs),
		PendingReason: a.PendingReason, Template: tmpl}
}

// phaseOrder is the order counts are shown in.
var phaseOrder = []palyrav1.JobPhase{
	palyrav1.JobPhase_JOB_PHASE_COMPLETED, palyrav1.JobPhase_JOB_PHASE_FAILED, palyrav1.JobPhase_JOB_PHASE_ABORTED,
	palyrav1.JobPhase_JOB_PHASE_EXPIRED, palyrav1.JobPhase_JOB_PHASE_RUNNING, palyrav1.JobPhase_JOB_PHASE_QUEUED,
	palyrav1.JobPhase_JOB_PHASE_WAITING_FOR_APPROVAL, palyrav1.JobPhase_JOB_PHASE_PAUSED,
}

// countsText is "80 completed, 8 failed, 2 running, 10 queued" (phases
// with tasks only).
func countsText(a *palyrav1.JobArray) string {
	var parts []string
	for _, p := range phaseOrder {
		if n := a.Counts[p.WireName()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, p.WireName()))
		}
	}
	return strings.Join(parts, ", ")
}

// ended is how many tasks have ended.
func ended(a *palyrav1.JobArray) uint64 {
	var n uint64
	for _, p := range phaseOrder {
		if p.Terminal() {
			n += a.Counts[p.WireName()]
		}
	}
	return n
}

// notCompleted is how many tasks ended without completing.
func notCompleted(a *palyrav1.JobArray) uint64 {
	return ended(a) - a.Counts[palyrav1.JobPhase_JOB_PHASE_COMPLETED.WireName()]
}

func printArray(w io.Writer, a *palyrav1.JobArray) {
	v := toArrayJSON(a)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	done := "no"
	if a.Done {
		done = "yes, ended " + v.EndedAt
	}
	fmt.Fprintf(tw, "array\t%s\ntasks\t%d: %s\n", v.ID, v.Size, countsText(a))
	if a.Counts[palyrav1.JobPhase_JOB_PHASE_RUNNING.WireName()] > 0 && !a.Done {
		// Workers hold tasks ahead of their slots (--array-prefetch):
		// "running" counts every task placed on a worker.
		fmt.Fprintf(tw, "\t(running: placed on a worker, running or waiting there for a slot)\n")
	}
	fmt.Fprintf(tw, "done\t%s\n", done)
	if a.PendingReason != "" && !a.Done {
		fmt.Fprintf(tw, "waiting\t%s\n", printableText(a.PendingReason))
	}
	if v.Template.ModuleSHA256 != "" {
		fmt.Fprintf(tw, "module\tsha256:%s\n", v.Template.ModuleSHA256)
	}
	if a.Template != nil {
		fmt.Fprintf(tw, "limits\t%s (each task)\n", jobLimitsText(a.Template, v.Template))
		if len(v.Template.Constraints) > 0 {
			fmt.Fprintf(tw, "constraints\t%s\n", constraintsText(v.Template.Constraints))
		}
		if v.Template.Priority != 0 {
			fmt.Fprintf(tw, "priority\t%d\n", v.Template.Priority)
		}
	}
	fmt.Fprintf(tw, "submitter\t%s\nsubmitted\t%s\n", v.Template.Submitter, v.Template.SubmittedAt)
	tw.Flush()
	fmt.Fprintf(w, "tasks: palyra job list --array %s · outputs: palyra job watch %s\n", v.ID, v.ID)
}

// terminalWidth is w's width in columns when w is a terminal, else 0.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return cols
}

// progress shows an array's progress on w: a bar redrawn in place on a
// terminal, else a plain line at most once a second (and the last one).
type progress struct {
	w    io.Writer
	tty  bool
	cols int // the terminal's width (0: unknown)
	last time.Time
	drew bool
}

func (p *progress) update(a *palyrav1.JobArray) {
	if p.tty {
		const width = 30
		done := int(ended(a) * width / uint64(max(a.Size, 1)))
		bar := strings.Repeat("#", done) + strings.Repeat(".", width-done)
		line := fmt.Sprintf("[%s] %d/%d ended  %s", bar, ended(a), a.Size, countsText(a))
		if p.cols > 1 && len(line) > p.cols-1 {
			// A line wider than the terminal wraps, and \r then redraws
			// only its last row: every update left a stale one above.
			line = line[:p.cols-1]
		}
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.drew = true
		if a.Done {
			fmt.Fprintln(p.w)
		}
		return
	}
	if !a.Done && time.Since(p.last) < time.Second {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "array %s: %d/%d ended (%s)\n", a.Id, ended(a), a.Size, countsText(a))
}

// watchArray follows array id until every task has ended, showing
// progress, and rides out a restarting or silent node (through another,
// if the client knows one) for up to a minute of failures.
func watchArray(ctx context.Context, cl *client.Client, id string, show func(*palyrav1.JobArray)) (*palyrav1.JobArray, error) {
	var lastErr error
	deadline := time.Now().Add(time.Minute)
	f := cl.Follow(id)
	defer f.Close()
	for time.Now().Before(deadline) {
		stream, err := cl.Jobs.WatchJob(ctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
		if err == nil {
			for stream.Receive() {
				f.Delivered()
				a := stream.Msg().Array
				if a == nil {
					stream.Close()
					return nil, &client.Error{Code: "invalid_argument", Message: fmt.Sprintf("%s is a job, not a job array", id)}
				}
				deadline = time.Now().Add(time.Minute)
				show(a)
				if a.Done {
					stream.Close()
					return a, nil
				}
			}
			err = stream.Err()
			stream.Close()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ce *connect.Error
		if (errors.As(err, &ce) && (ce.Code() == connect.CodeNotFound || ce.Code() == connect.CodePermissionDenied)) || client.CredentialRefused(err) {
			return nil, err
		}
		lastErr = err
		if !f.Broke(ctx, err) {
			return nil, ctx.Err()
		}
	}
	return nil, lastErr
}

// followArray waits for an array to end (progress on stderr), then hands
// out every task's result in task order: stdout on stdout (a newline
// added after an output that lacks one, an empty output an empty line,
// so output line N is task N's when outputs are one line each) or, with --output-dir, one file
// per task; stderr on stderr; each task that did not complete reported
// on stderr. With --json it prints one document {array, tasks}. It fails
// (exit 1) if any task did not complete.
// names, when the array came from --input-dir, are its files (task i's
// first): with --output-dir they go to DIR/inputs.tsv ("index<TAB>file"),
// so each output can be traced to its input.
func followArray(c *ucli.Context, cl *client.Client, id string, giveUp bool, src taskInputs) error {
	names := src.names
	// failed names the array, and where its results are, in a failure
	// here: the array goes on (or has ended) whatever failed on this side.
	failed := func(e *client.Error) error {
		hint := fmt.Sprintf("array %s was submitted: its counts with 'palyra job get %s', its outputs with 'palyra job watch %s'", id, id, id)
		if e.Hint != "" {
			hint = e.Hint + "; " + hint
		}
		return fail(c, &client.Error{Code: e.Code, Message: fmt.Sprintf("array %s: %s", id, e.Message), Hint: hint})
	}
	outDir := c.String("output-dir")
	if outDir != "" {
		// job submit did this before submitting; job watch does it here.
		if err := checkOutputDir(outDir); err != nil {
			return err
		}
		if err := makeOutputDir(outDir); err != nil {
			return failed(&client.Error{Code: "io_error", Message: fmt.Sprintf("cannot write to --output-dir %s: %v", outDir, err),
				Hint: "give a directory you can create and write to"})
		}
		if names != nil {
			var b strings.Builder
			width := max(6, len(strconv.Itoa(len(names)-1)))
			for i, n := range names {
				// A name with a tab or newline (or anything not
				// printable) is quoted, so each line maps one task.
				fmt.Fprintf(&b, "%0*d\t%s\n", width, i, printableText(n))
			}
			if err := os.WriteFile(filepath.Join(outDir, "inputs.tsv"), []byte(b.String()), 0o644); err != nil {
				return failed(&client.Error{Code: "io_error", Message: fmt.Sprintf("writing %s: %v", filepath.Join(outDir, "inputs.tsv"), err)})
			}
		}
	}
	p := &progress{w: c.App.ErrWriter, tty: isTerminal(c.App.ErrWriter), cols: terminalWidth(c.App.ErrWriter)}
	if cl.Notify == nil {
		cl.Notify = reconnectNotices(c.App.ErrWriter)
	}
	ctx, cancelTimeout := withWaitTimeout(c)
	defer cancelTimeout()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var seen atomic.Pointer[palyrav1.JobArray]
	var stuck atomic.Pointer[palyrav1.Job]  // task 0, when no task can start anywhere
	if d := giveUpFor(c); d > 0 && giveUp { // submit --wait gives up; job watch follows for as long as it takes
		go giveUpOnArray(wctx, cl, &seen, &stuck, d, cancel)
	}
	a, err := watchArray(wctx, cl, id, func(a *palyrav1.JobArray) { seen.Store(a); p.update(a) })
	if err != nil {
		if p.drew {
			fmt.Fprintln(p.w) // end the progress bar's line
		}
		if interrupted(c) {
			return stoppedFollowing(c, "job array", id)
		}
		stillText := func() string {
			if a := seen.Load(); a != nil {
				return countsText(a)
			}
			return "not ended"
		}
		goesOn := fmt.Sprintf("The array goes on: follow it with 'palyra job watch %s' or cancel it with 'palyra job cancel %s'", id, id)
		switch {
		case stuck.Load() != nil:
			j := stuck.Load()
			msg := fmt.Sprintf("array %s: no task can start: %s", id, j.PendingReason)
			if h := browserHint(j.PendingReason); j.Kind == "browser" && h != "" {
				msg += " (" + h + ")"
			}
			return ucli.Exit(msg+". "+goesOn, exitFailure)
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return ucli.Exit(fmt.Sprintf("gave up waiting after %s: array %s is still %s. %s", waitTimeoutOf(ctx), id, stillText(), goesOn), exitFailure)
		}
		return failed(cl.Explain(err))
	}
	width := max(6, len(strconv.Itoa(int(a.Size)-1)))
	out, errw := c.App.Writer, c.App.ErrWriter
	asJSON := c.Bool("json")
	if asJSON {
		head, _ := json.Marshal(toArrayJSON(a))
		fmt.Fprintf(out, "{\n  \"array\": %s,\n  \"tasks\": [", head)
	}
	first := true
	failures := taskFailures{}
	err = cl.ArrayTasks(c.Context, id, staleRead(c), func(t *palyrav1.Job) error {
		if outDir != "" {
			base := filepath.Join(outDir, fmt.Sprintf("%0*d", width, t.ArrayIndex))
			completed := t.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED
			if !completed {
				if err := os.WriteFile(base+".failed", []byte(taskReason(t)+"\n"), 0o644); err != nil {
					return err
				}
			}
			// A task that did not complete gets a .out only if it wrote
			// something (an empty one would read as an empty result).
			if completed || len(t.Stdout) > 0 {
				if err := os.WriteFile(base+".out", t.Stdout, 0o644); err != nil {
					return err
				}
			}
			if len(t.Stderr) > 0 {
				if err := os.WriteFile(base+".err", t.Stderr, 0o644); err != nil {
					return err
				}
			}
		}
		if asJSON {
			b, err := json.Marshal(toJobJSON(t))
			if err != nil {
				return err
			}
			if !first {
				fmt.Fprint(out, ",")
			}
			first = false
			fmt.Fprintf(out, "\n    %s", b)
		} else if outDir == "" {
			// Output line N is task N's: an output that does not end
			// in a newline gets one, and an empty one is an empty line.
			out.Write(t.Stdout)
			if len(t.Stdout) == 0 || t.Stdout[len(t.Stdout)-1] != '\n' {
				fmt.Fprintln(out)
			}
			stderr := t.Stderr
			if t.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED && t.Error != nil {
				// The failure line below quotes the last line.
				stderr = stderrBeforeQuote(t.Stderr, t.Error.Message)
			}
			if len(stderr) > 0 {
				errw.Write(stderrTail(stderr, t.Id))
				if stderr[len(stderr)-1] != '\n' {
					fmt.Fprintln(errw)
				}
			}
		}
		if t.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
			if !failures.show(t) {
				return nil
			}
			label := t.Id
			if in := src.of(t.ArrayIndex); in != "" {
				label += ", " + in
			}
			fmt.Fprintf(errw, "task %d (%s) %s\n", t.ArrayIndex, label, taskReason(t))
		}
		return nil
	})
	failures.summary(errw, id)
	if asJSON {
		fmt.Fprint(out, "\n  ]\n}\n")
	}
	if err != nil {
		if interrupted(c) {
			return failWith(c, &client.Error{Code: "interrupted",
				Message: fmt.Sprintf("interrupted while printing the outputs of job array %s (every task has ended)", id),
				Hint:    fmt.Sprintf("print them again with 'palyra job watch %s' (with --output-dir, into a new directory)", id)}, exitInterrupted)
		}
		var ce *connect.Error
		if errors.As(err, &ce) {
			return failed(cl.Explain(err))
		}
		return failed(&client.Error{Code: "io_error", Message: fmt.Sprintf("writing task output: %v", err),
			Hint: "check that --output-dir is writable and has room"})
	}
	if n := notCompleted(a); n > 0 {
		return ucli.Exit(fmt.Sprintf("array %s: %d of %d tasks did not complete (%s)", id, n, a.Size, countsText(a)), exitFailure)
	}
	return nil
}

// taskInputs is where an array's inputs came from, when the command
// knows: the --inputs file ("-" for stdin) or the --input-dir file names.
type taskInputs struct {
	file  string
	names []string
}

// of says which input task i ran: "line 7 of in.txt", "file b.txt", or ""
// when unknown.
func (s taskInputs) of(i uint32) string {
	switch {
	case s.names != nil && int(i) < len(s.names):
		return "file " + printableText(s.names[i])
	case s.file == "-":
		return fmt.Sprintf("line %d of stdin", i+1)
	case s.file != "":
		return fmt.Sprintf("line %d of %s", i+1, s.file)
	}
	return ""
}

// stderrBeforeQuote is a failed task's stderr without its last line when
// its failure message ends by quoting that line (a non-zero exit quotes
// stderr's tail): the failure line follows, and would repeat it. Otherwise
// it is the whole stderr.
func stderrBeforeQuote(stderr []byte, message string) []byte {
	s := bytes.TrimRight(stderr, " \t\r\n")
	i := bytes.LastIndexByte(s, '\n')
	last := strings.TrimSpace(string(s[i+1:]))
	if last == "" || !strings.HasSuffix(message, ": "+last) {
		return stderr
	}
	return s[:i+1]
}

// taskReason is "failed: message (code)" for a task that did not complete.
// maxTaskFailureLines is how many tasks that did not complete are named
// on stderr for each way they ended (phase and error code); the rest are
// counted (a trial: a cancelled array of 400,000 tasks wrote 399,992 lines).
const maxTaskFailureLines = 20

// taskFailures counts, per way of ending, the tasks that did not complete.
type taskFailures map[[2]string]int

// show counts t and reports whether its line is printed.
func (f taskFailures) show(t *palyrav1.Job) bool {
	k := [2]string{t.Phase.WireName(), ""}
	if t.Error != nil {
		k[1] = t.Error.Code
	}
	f[k]++
	return f[k] <= maxTaskFailureLines
}

// summary says, for each way of ending with tasks left unnamed, how many
// and how to list them all.
func (f taskFailures) summary(w io.Writer, array string) {
	keys := make([][2]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) })
	for _, k := range keys {
		if n := f[k] - maxTaskFailureLines; n > 0 {
			how := k[0]
			if k[1] != "" {
				how += " (" + k[1] + ")"
			}
			fmt.Fprintf(w, "… and %d more tasks %s, not named here; all of them: palyra job list --array %s --phase %s\n", n, how, array, k[0])
		}
	}
}

func taskReason(t *palyrav1.Job) string {
	msg := t.Phase.WireName()
	if t.Attempt > 1 {
		msg += fmt.Sprintf(" after %d attempts", t.Attempt)
	}
	if t.Error != nil {
		msg += fmt.Sprintf(": %s (%s)", t.Error.Message, t.Error.Code)
		if t.Error.Hint != "" {
			msg += "; " + t.Error.Hint
		}
	}
	return msg
}

// maxScriptRead bounds what --browser reads (a node takes scripts of at
// most 1 MiB and says so; this only keeps a wrong file from filling memory).
const maxScriptRead = palyrav1.MaxModuleBytes

// checkOutputDir refuses an --output-dir that holds anything: the files of
// another run would mix with this one's (a task that failed now would keep
// an earlier run's .out). A missing directory is fine (it is created).
func checkOutputDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return usageErr("--output-dir %s: %v", dir, err)
	case len(entries) > 0:
		return usageErr("--output-dir %s is not empty (%d entries, %s first): give a new or empty directory, so no other run's files mix with these", dir, len(entries), entries[0].Name())
	}
	return nil
}

// makeOutputDir creates --output-dir and checks that it takes files:
// job submit does so before submitting, so that an array does not run only
// for its results to have nowhere to go.
func makeOutputDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".palyra-write-check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// giveUpOnArray cancels an array's wait when, d after the wait began (and
// every d after), no task has run yet and its first task waits because no
// node in the cluster can run it (its pending reason says so): the array
// would wait for ever, as a single job would, and --wait says so instead.
func giveUpOnArray(ctx context.Context, cl *client.Client, seen *atomic.Pointer[palyrav1.JobArray], stuck *atomic.Pointer[palyrav1.Job],
	d time.Duration, cancel context.CancelFunc) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a := seen.Load()
		if a == nil || a.Done || ended(a) > 0 || a.Counts["running"] > 0 {
			continue
		}
		resp, err := cl.Jobs.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: a.Id + ".0"}))
		if err != nil {
			continue
		}
		if j := resp.Msg.Job; unplaceable(j) {
			stuck.Store(j)
			cancel()
			return
		}
	}
}

// maxTaskStderrLines is how much of each task's stderr 'job submit
// --inputs … --wait' prints: a thousand failing tasks' crash dumps (a
// hundred lines each) buried the outputs and the failure lines.
const maxTaskStderrLines = 20

// stderrTail is a task's stderr, cut to its last maxTaskStderrLines lines
// after a line naming the task and where the whole of it is.
func stderrTail(stderr []byte, id string) []byte {
	s := bytes.TrimRight(stderr, "\n")
	n := bytes.Count(s, []byte("\n")) + 1
	if n <= maxTaskStderrLines {
		return stderr
	}
	cut := s
	for i := 0; i < maxTaskStderrLines; i++ {
		cut = cut[:bytes.LastIndexByte(cut, '\n')]
	}
	tail := stderr[len(cut)+1:]
	head := fmt.Sprintf("[%s: stderr's last %d of %d lines; all of it: palyra job logs %s, or --output-dir]\n", id, maxTaskStderrLines, n, id)
	return append([]byte(head), tail...)
}
