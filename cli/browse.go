package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func browseCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "browse",
		Usage:     "open a URL in a headless browser on a worker and fetch what you ask for",
		ArgsUsage: "URL",
		Description: `A shortcut for a browser job: navigate to URL, then optionally extract the text
   of a CSS selector, take a screenshot, print to PDF. The URL's host is granted
   automatically; other hosts the page loads from need --allow-host.

   A page that answers an HTTP error status (4xx, 5xx) loads as any page
   does and the command exits 0, with a note on stderr naming the status;
   with --fail (as curl --fail) it is an error instead, exit 1.

   Example:
     palyra job browse https://example.com --text h1 --screenshot page.png`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "text", Usage: "print the text of the first element matching `SELECTOR`"},
			&ucli.StringFlag{Name: "screenshot", Usage: "save a PNG screenshot of the page to `FILE`"},
			&ucli.StringFlag{Name: "pdf", Usage: "save the page as PDF to `FILE`"},
			&ucli.StringSliceFlag{Name: "allow-host", Usage: "other `HOST`s the page may load from (repeatable)"},
			&ucli.BoolFlag{Name: "allow-private", Usage: "allow private, loopback and link-local targets (a policy grant)"},
			&ucli.BoolFlag{Name: "fail", Usage: "exit 1 when the page answers an HTTP error status (4xx, 5xx), as curl --fail does; by default it is a note on stderr"},
			&ucli.DurationFlag{Name: "timeout", Usage: "job time limit", Value: time.Minute},
			&ucli.StringFlag{Name: "max-output", Usage: "bound on the page's extracted text (and the job's stderr), e.g. 4MiB (default 1MiB)"},
			&ucli.DurationFlag{Name: "step-timeout", Usage: "time limit of each step (loading the page, waiting for --text's element, …)", DefaultText: "the worker's default, 15s"},
			&ucli.DurationFlag{Name: "wait-timeout", Usage: "stop waiting after `DURATION` and cancel the job; by default browse waits for the job's end, but gives up within seconds when no node in the cluster can run browser jobs", DefaultText: "none"},
			jsonFlag,
		},
		Action: jobBrowse,
	}
}

func jobBrowse(c *ucli.Context) error {
	raw, err := oneArg(c, "URL")
	if err != nil {
		return err
	}
	for _, flag := range []string{"screenshot", "pdf"} {
		if c.String(flag) == "-" {
			// Stdout carries the page's text (or --json); a file named "-"
			// was written instead.
			return usageErr("--%s -: job browse writes the %s to a file; for stdout, save it from the job afterwards: palyra job artifact JOB_ID page.%s -o -", flag, flag, map[string]string{"screenshot": "png", "pdf": "pdf"}[flag])
		}
	}
	if err := checkBrowseOutputs(c.String("screenshot"), c.String("pdf")); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return usageErr("%q is not an http(s) URL", raw)
	}
	steps := []map[string]any{{"action": "navigate", "url": raw}}
	if sel := c.String("text"); sel != "" {
		steps = append(steps, map[string]any{"action": "wait_for", "selector": sel},
			map[string]any{"action": "extract", "selector": sel, "name": "text"})
	}
	if c.String("screenshot") != "" {
		steps = append(steps, map[string]any{"action": "screenshot", "name": "page.png"})
	}
	if c.String("pdf") != "" {
		steps = append(steps, map[string]any{"action": "pdf", "name": "page.pdf"})
	}
	doc := map[string]any{"steps": steps}
	if st := c.Duration("step-timeout"); st < 0 {
		return usageErr("--step-timeout %v is negative", st)
	} else if st > 0 {
		if t := c.Duration("timeout"); t > 0 && st > t { // 0: the cluster's default
			return usageErr("--step-timeout %v is longer than the job's --timeout %v: raise --timeout too", st, c.Duration("timeout"))
		}
		doc["timeout_ms"] = max(1, st.Milliseconds())
	}
	var maxOut uint64
	if s := c.String("max-output"); s != "" {
		if maxOut, err = ParseSize(s); err != nil {
			return usageErr("--max-output: %v", err)
		}
	}
	script, _ := json.Marshal(doc)
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Jobs.SubmitJob(c.Context, connect.NewRequest(&palyrav1.SubmitJobRequest{
		BrowserScript: script, AllowHosts: append([]string{u.Hostname()}, c.StringSlice("allow-host")...),
		AllowPrivate: c.Bool("allow-private"), TimeoutMs: c.Duration("timeout").Milliseconds(), MaxOutputBytes: maxOut,
	}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	ctx, cancel := withWaitTimeout(c)
	defer cancel()
	id := resp.Msg.Job.Id
	job, err := waitJob(ctx, cl, id, waitOpts{progress: c.App.ErrWriter, giveUp: giveUpFor(c)})
	var sq *stillQueuedError
	if errors.As(err, &sq) {
		// A one-shot browse that cannot run is withdrawn, not left queued.
		if _, cerr := cl.Jobs.CancelJob(c.Context, connect.NewRequest(&palyrav1.CancelJobRequest{Id: id})); cerr != nil {
			return waitFailed(c, cl, err)
		}
		if sq.unplaceable {
			why := chromiumHint
			if sq.job != nil && browserHint(sq.job.PendingReason) == "" {
				why = sq.job.PendingReason
			}
			return ucli.Exit(fmt.Sprintf("no node in the cluster can run this browser job: %s (job %s cancelled)", why, id), exitFailure)
		}
		return ucli.Exit(fmt.Sprintf("gave up waiting after %s: job %s was still %s; cancelled it", sq.after, id, sq.job.GetPhase().WireName()), exitFailure)
	}
	if err != nil {
		return waitFailed(c, cl, err) // an interrupted wait says the job goes on
	}
	status := pageStatus(job)
	if status != "" && c.Bool("fail") && job.Phase == palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		if c.Bool("json") {
			writeJSON(c.App.Writer, toJobJSON(job))
		}
		return ucli.Exit(status+" (--fail)", exitFailure)
	}
	if status != "" && !c.Bool("json") {
		// Also why a --text step that waited in vain failed.
		fmt.Fprintf(c.App.ErrWriter, "note: %s\n", status)
	}
	if job.Phase != palyrav1.JobPhase_JOB_PHASE_COMPLETED {
		if c.Bool("json") {
			// One object on stdout, as 'job submit --wait --json' gives.
			return printEnded(c, job)
		}
		writeNotes(c, job.Stderr)
		// The script is the command's own making: its settings are the
		// command's flags.
		reason := strings.ReplaceAll(jobReason(job), "(set by the script's timeout_ms)", "(set by --step-timeout)")
		if sel := c.String("text"); sel != "" && job.Error != nil && strings.Contains(job.Error.Message, "(wait_for)") && strings.Contains(job.Error.Message, "step timeout") {
			// The --text element never appeared: say so in the words of
			// the command, not of the script it made.
			reason += fmt.Sprintf("\nhint: no element matched --text %q in time; check the selector, or give the page longer with --step-timeout", sel)
		}
		return ucli.Exit(reason, exitFailure)
	}
	if !c.Bool("json") {
		// The page loaded, but what the worker noted (a sub-request to a
		// host not granted, blocked) may be why it looks wrong.
		writeNotes(c, job.Stderr)
	}
	for flag, name := range map[string]string{"screenshot": "page.png", "pdf": "page.pdf"} {
		if path := c.String(flag); path != "" {
			if err := saveArtifact(c, cl, job.Id, name, path); err != nil {
				return err
			}
		}
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, toJobJSON(job))
	}
	if c.String("text") != "" {
		var vals map[string]any
		if err := json.Unmarshal(job.Stdout, &vals); err == nil {
			fmt.Fprintln(c.App.Writer, vals["text"])
		}
	}
	return nil
}

// pageStatus says which HTTP error status (4xx, 5xx) the page of a browse
// job's navigate step answered, "" when none: the worker records it in the
// job's stderr as a JSON line {"status":404,"status_text":…,"url":…,
// "step":0} (runtime/browser, statusLine).
func pageStatus(job *palyrav1.Job) string {
	for _, line := range bytes.Split(job.Stderr, []byte("\n")) {
		var l struct {
			Status     int    `json:"status"`
			StatusText string `json:"status_text"`
			URL        string `json:"url"`
			Step       int    `json:"step"`
		}
		if json.Unmarshal(line, &l) != nil || l.Status < 400 || l.Step != 0 {
			continue
		}
		return fmt.Sprintf("the page answered %d %s: %s", l.Status, l.StatusText, l.URL)
	}
	return ""
}

func artifactCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "artifact",
		Usage:     "download a job's artifact (a screenshot, a PDF)",
		ArgsUsage: "JOB_ID NAME",
		Flags:     []ucli.Flag{&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` (default: NAME in the current directory; - for stdout)"}, jsonFlag},
		Action: func(c *ucli.Context) error {
			if c.NArg() != 2 {
				return usageErr("job artifact takes JOB_ID and NAME (names are listed by 'palyra job get ID --json')")
			}
			out := c.String("output")
			if out == "" {
				out = filepath.Base(c.Args().Get(1))
			}
			if out == "-" && c.Bool("json") {
				return usageErr("-o - writes the artifact's bytes to stdout; --json describes a file written: give one of them")
			}
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := saveArtifact(c, cl, c.Args().Get(0), c.Args().Get(1), out); err != nil {
				return err
			}
			if c.Bool("json") {
				fi, err := os.Stat(out)
				if err != nil {
					return fail(c, &client.Error{Code: "io", Message: err.Error()})
				}
				return writeJSON(c.App.Writer, map[string]any{"job_id": c.Args().Get(0), "name": c.Args().Get(1), "path": out, "bytes": fi.Size()})
			}
			return nil
		},
	}
}

func saveArtifact(c *ucli.Context, cl *client.Client, jobID, name, path string) error {
	resp, err := cl.Jobs.GetArtifact(c.Context, connect.NewRequest(&palyrav1.GetArtifactRequest{JobId: jobID, Name: name}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	path, err = writeFileOrStdout(c, path, resp.Msg.Data)
	if err != nil {
		return fail(c, &client.Error{Code: "io", Message: err.Error()})
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s (%s, %d bytes, sha256:%s)\n", path, resp.Msg.Artifact.MediaType, len(resp.Msg.Data), resp.Msg.Artifact.Sha256[:12])
	return nil
}

// writeFileOrStdout writes data to path, or to stdout when path is "-"
// (a file named "-" was written), and says where it went.
func writeFileOrStdout(c *ucli.Context, path string, data []byte) (string, error) {
	if path == "-" {
		_, err := c.App.Writer.Write(data)
		return "stdout", err
	}
	return path, os.WriteFile(path, data, 0o644)
}

// writeNotes copies a browse job's stderr notes to stderr, a blocked
// request as one line a person reads ("note: blocked Image http://…:
// host … is not in the job's --allow-host list"), without the page-status
// line (printed as a note of its own above).
func writeNotes(c *ucli.Context, stderr []byte) {
	for _, line := range bytes.SplitAfter(stderr, []byte("\n")) {
		var l struct {
			Status  int    `json:"status"`
			Blocked string `json:"blocked"`
			Type    string `json:"type"`
			Reason  string `json:"reason"`
		}
		isJSON := json.Unmarshal(line, &l) == nil
		switch {
		case len(bytes.TrimSpace(line)) == 0, isJSON && l.Status != 0:
			continue
		case isJSON && l.Blocked != "":
			fmt.Fprintf(c.App.ErrWriter, "note: blocked %s %s: %s\n", strings.ToLower(l.Type), l.Blocked, l.Reason)
			continue
		}
		c.App.ErrWriter.Write(line)
		if line[len(line)-1] != '\n' {
			fmt.Fprintln(c.App.ErrWriter)
		}
	}
}

// checkBrowseOutputs refuses, before the job runs, output files that
// could not be written or would be wrong: a directory that does not
// exist (the job ran, then the save failed, with no job id to fetch the
// artifact by), one file for both (the PDF replaced the PNG), an
// extension that is not the format (PNG bytes went into x.jpg).
func checkBrowseOutputs(screenshot, pdf string) error {
	if screenshot != "" && screenshot == pdf {
		return usageErr("--screenshot and --pdf both name %s: give each its own file", screenshot)
	}
	for flag, path := range map[string]string{"screenshot": screenshot, "pdf": pdf} {
		if path == "" {
			continue
		}
		want := map[string]string{"screenshot": ".png", "pdf": ".pdf"}[flag]
		if ext := strings.ToLower(filepath.Ext(path)); ext != "" && ext != want {
			return usageErr("--%s %s: the %s is a %s file; name it …%s", flag, path, flag, strings.TrimPrefix(want, "."), want)
		}
		dir := filepath.Dir(path)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return usageErr("--%s %s: the directory %s does not exist; create it first, or name a file elsewhere", flag, path, dir)
		}
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return usageErr("--%s %s is a directory: name a file, e.g. %s", flag, path, filepath.Join(path, "page"+want))
		}
	}
	return nil
}
