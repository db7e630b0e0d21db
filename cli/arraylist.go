package cli

import (
	"fmt"
	"text/tabwriter"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// jobListArrays is 'palyra job list --arrays': the job arrays, newest
// first, one row each with its counts (their tasks: --array ID).
func jobListArrays(c *ucli.Context) error {
	for _, f := range []string{"phase", "node", "array"} {
		if c.IsSet(f) {
			return usageErr("--arrays lists the arrays themselves; --%s filters jobs: drop one of them (an array's tasks: --array ID)", f)
		}
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Jobs.ListArrays(c.Context, connect.NewRequest(&palyrav1.ListArraysRequest{
		Limit: uint32(c.Uint("limit")), AfterId: c.String("after"), Stale: staleRead(c), OldestFirst: c.Bool("oldest-first")}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	if c.Bool("json") {
		out := struct {
			Arrays      []arrayJSON `json:"arrays"`
			NextAfterID string      `json:"next_after_id,omitempty"`
		}{Arrays: []arrayJSON{}, NextAfterID: resp.Msg.NextAfterId}
		for _, a := range resp.Msg.Arrays {
			out.Arrays = append(out.Arrays, toArrayJSON(a))
		}
		return writeJSON(c.App.Writer, out)
	}
	if len(resp.Msg.Arrays) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "no job arrays (submit one with 'palyra job submit --wasm M --inputs FILE')")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTASKS\tDONE\tSUBMITTED\tCOUNTS")
	for _, a := range resp.Msg.Arrays {
		v := toArrayJSON(a)
		done := "no"
		if a.Done {
			done = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", v.ID, v.Size, done, v.Template.SubmittedAt, countsText(a))
	}
	tw.Flush()
	if next := resp.Msg.NextAfterId; next != "" {
		cmd := "palyra job list --arrays"
		if c.IsSet("limit") {
			cmd += fmt.Sprintf(" --limit %d", c.Uint("limit"))
		}
		if c.Bool("oldest-first") {
			cmd += " --oldest-first"
		}
		if staleRead(c) {
			cmd += " --stale"
		}
		fmt.Fprintf(c.App.ErrWriter, "more arrays: %s --after %s\n", cmd, next)
	}
	return nil
}

// tasksNote, under a job list page holding array tasks, says how to see
// the arrays instead.
func tasksNote(jobs []*palyrav1.Job) string {
	n := 0
	for _, j := range jobs {
		if j.ArrayId != "" {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	if n == 1 {
		return "1 of these is a task of a job array: 'palyra job list --arrays' lists the arrays, '--array ID' one array's tasks"
	}
	return fmt.Sprintf("%d of these are tasks of job arrays: 'palyra job list --arrays' lists the arrays, '--array ID' one array's tasks", n)
}
