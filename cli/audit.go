package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// auditHeader is the first line of an export: where the chain starts.
type auditHeader struct {
	Format     string `json:"format"`
	BaseSeq    uint64 `json:"base_seq"`
	BaseSHA256 string `json:"base_sha256"`
	HeadSeq    uint64 `json:"head_seq"`
	HeadSHA256 string `json:"head_sha256"`
}

const auditExportFormat = "palyra-audit-export-v1"

func auditCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "audit",
		Usage: "the audit journal: who changed what (pairing, revocation, policy, secrets, skills, approvals, CA)",
		Description: `Every security-relevant change is appended to a replicated, hash-chained
   journal: each record's sha256 covers the previous record's hash and its own
   fields, and every node holds the same chain. 'verify' recomputes it on the
   node; 'export' writes it to a file (JSON lines) that 'verify --file' checks
   offline, naming the first record that does not verify.`,
		Subcommands: []*ucli.Command{
			{
				Name:  "list",
				Usage: "list journal records, newest first (--oldest-first for journal order)",
				Description: `Shows the newest --limit records, newest first; when older ones remain it
   prints on stderr the flag for the next page (--before SEQ). --oldest-first
   lists from the start of the journal (or from --after SEQ) in journal
   order, the next page being --after SEQ. 'palyra audit export' writes all.`,
				Flags: []ucli.Flag{
					&ucli.Uint64Flag{Name: "after", Usage: "only records after sequence number `SEQ`"},
					&ucli.Uint64Flag{Name: "before", Usage: "only records before sequence number `SEQ` (the next page, newest first)"},
					&ucli.DurationFlag{Name: "since", Usage: "only records of the last `DURATION` (e.g. 24h)"},
					&ucli.IntFlag{Name: "limit", Value: 100, Usage: "at most `N` records (1000 at most)"},
					&ucli.BoolFlag{Name: "oldest-first", Usage: "list in journal order, from the oldest record (or --after SEQ)"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					if l := c.Int("limit"); l < 1 || l > 1000 {
						return usageErr("--limit %d: a page holds 1 to 1000 records (default 100)", l)
					}
					if c.Bool("oldest-first") && c.IsSet("before") {
						return usageErr("--before pages newest first; with --oldest-first page on with --after SEQ")
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					var sinceMs int64
					if d := c.Duration("since"); d > 0 {
						sinceMs = time.Now().Add(-d).UnixMilli()
					}
					var resp *connect.Response[palyrav1.ListAuditResponse]
					if c.Bool("oldest-first") {
						resp, err = cl.Audit.ListAudit(c.Context, connect.NewRequest(&palyrav1.ListAuditRequest{
							AfterSeq: c.Uint64("after"), Limit: uint32(max(0, c.Int("limit"))), SinceMs: sinceMs, Stale: staleRead(c)}))
					} else {
						resp, err = listAuditNewest(c, cl, sinceMs)
					}
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, resp.Msg)
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "SEQ\tTIME\tACTOR\tACTION\tSUBJECT\tDETAIL")
					for _, r := range resp.Msg.Records {
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Seq, time.UnixMilli(r.AtMs).UTC().Format(time.RFC3339), printableText(r.Actor), printableText(r.Action), printableText(r.Subject), printableText(r.Detail))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if resp.Msg.More && len(resp.Msg.Records) > 0 {
						last := resp.Msg.Records[len(resp.Msg.Records)-1].Seq
						if c.Bool("oldest-first") {
							fmt.Fprintf(c.App.ErrWriter, "more records follow: --oldest-first --after %d\n", last)
						} else {
							fmt.Fprintf(c.App.ErrWriter, "older records: --before %d\n", last)
						}
					}
					return nil
				},
			},
			{
				Name:  "verify",
				Usage: "recompute the journal's hash chain (on a node, or in an export with --file)",
				Description: `Without --file, a node recomputes the replicated journal's chain and names
   its head (the last record's sha256).

   With --file, the export is checked offline: each record's hash, the
   chain between them, and that it ends at the head its header names. The
   chain is not signed: whoever can write the file can rewrite it whole,
   recompute every hash and its header, and it still verifies on its own.
   It proves something only against a head you trust, recorded elsewhere
   (the head 'palyra audit verify' printed, kept by another party, or read
   from the cluster now): give it with --head, and the export must end
   exactly there.

   Examples:
     palyra audit verify
     palyra audit verify --file audit.jsonl --head 3f2a9c0d1e7b4a5f…(all 64 digits)`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "file", Usage: "verify an export written by 'palyra audit export' (offline)"},
					&ucli.StringFlag{Name: "head", Usage: "with --file: the head `SHA256` you trust (its 64 hex digits, at least 32); the export must end at it"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					if f := c.String("file"); f != "" {
						return verifyAuditFile(c, f)
					}
					if c.IsSet("head") {
						return usageErr("--head is for an export (--file): a node's own journal is verified against its replicas")
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Audit.VerifyAudit(c.Context, connect.NewRequest(&palyrav1.VerifyAuditRequest{}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					v := resp.Msg
					if c.Bool("json") {
						if err := writeJSON(c.App.Writer, v); err != nil {
							return err
						}
					} else if v.Ok {
						fmt.Fprintf(c.App.Writer, "journal verified on %s: %d records, seq %d..%d, head %s\n", v.ServedBy, v.Records, v.BaseSeq+1, v.HeadSeq, v.HeadSha256)
					}
					if !v.Ok {
						return fail(c, &client.Error{Code: "journal_corrupt", Message: fmt.Sprintf("record %d does not verify: %s", v.FirstBadSeq, v.Problem),
							Hint: "compare with 'palyra audit verify' through another node; restore that node from a snapshot"})
					}
					return nil
				},
			},
			{
				Name:  "export",
				Usage: "write the whole journal to a file (JSON lines: a header, then each record)",
				Flags: []ucli.Flag{&ucli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "`FILE` to write ('-' for stdout)", Value: "-"}},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					w := c.App.Writer
					if o := c.String("out"); o != "-" {
						f, err := os.Create(o)
						if err != nil {
							return localFail(c, "invalid_argument", err.Error(), "")
						}
						defer f.Close()
						w = f
					}
					bw := bufio.NewWriter(w)
					enc := json.NewEncoder(bw)
					var after uint64
					n := 0
					for first := true; ; first = false {
						resp, err := cl.Audit.ListAudit(c.Context, connect.NewRequest(&palyrav1.ListAuditRequest{AfterSeq: after, Limit: 1000, Stale: staleRead(c)}))
						if err != nil {
							return fail(c, cl.Explain(err))
						}
						m := resp.Msg
						if first {
							after = m.BaseSeq
							if err := enc.Encode(auditHeader{Format: auditExportFormat, BaseSeq: m.BaseSeq, BaseSHA256: m.BaseSha256, HeadSeq: m.HeadSeq, HeadSHA256: m.HeadSha256}); err != nil {
								return err
							}
						}
						for _, r := range m.Records {
							if err := enc.Encode(r); err != nil {
								return err
							}
							after = r.Seq
							n++
						}
						if !m.More {
							break
						}
					}
					if err := bw.Flush(); err != nil {
						return err
					}
					if c.String("out") != "-" {
						fmt.Fprintf(c.App.ErrWriter, "%d records written to %s\n", n, c.String("out"))
					}
					return nil
				},
			},
		},
	}
}

// maxAuditPage is the most records a node returns in one ListAudit.
const maxAuditPage = 1000

// listAuditNewest lists the newest --limit records (of those after
// --after, before --before and since sinceMs), newest first; More says
// older ones remain. The journal's sequence numbers have no gaps, so the
// page is the window of seqs below the head (or --before), asked for by
// the seq just before it.
func listAuditNewest(c *ucli.Context, cl *client.Client, sinceMs int64) (*connect.Response[palyrav1.ListAuditResponse], error) {
	// Past the head the journal answers no records, only where it starts
	// and ends.
	ends, err := cl.Audit.ListAudit(c.Context, connect.NewRequest(&palyrav1.ListAuditRequest{AfterSeq: math.MaxUint64, Limit: 1, Stale: staleRead(c)}))
	if err != nil {
		return nil, err
	}
	limit := uint64(c.Int("limit"))
	if c.Int("limit") <= 0 || limit > maxAuditPage {
		limit = maxAuditPage
	}
	upper, lower := ends.Msg.HeadSeq, max(c.Uint64("after"), ends.Msg.BaseSeq)
	if b := c.Uint64("before"); c.IsSet("before") && b <= upper {
		upper = max(b, 1) - 1
	}
	resp := ends
	resp.Msg.Records, resp.Msg.More = nil, false
	if upper <= lower {
		return resp, nil
	}
	start := lower
	if upper-lower > limit {
		start = upper - limit
	}
	page, err := cl.Audit.ListAudit(c.Context, connect.NewRequest(&palyrav1.ListAuditRequest{AfterSeq: start, Limit: uint32(upper - start), SinceMs: sinceMs, Stale: staleRead(c)}))
	if err != nil {
		return nil, err
	}
	recs := page.Msg.Records
	// With --since the node skips older records and may fill the page
	// with ones appended since the first call: those are not this page's.
	recs = slices.DeleteFunc(recs, func(r *palyrav1.AuditRecord) bool { return r.Seq > upper })
	slices.Reverse(recs)
	page.Msg.Records = recs
	// Records before the window remain unless --since already cut some of
	// the window (then every older one is older still).
	page.Msg.More = start > lower && uint64(len(recs)) == upper-start
	return page, nil
}

// verifyAuditFile checks an export offline.
func verifyAuditFile(c *ucli.Context, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return localFail(c, "invalid_argument", err.Error(), "")
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	dec := json.NewDecoder(br)
	var hdr auditHeader
	if err := dec.Decode(&hdr); err != nil || hdr.Format != auditExportFormat {
		return localFail(c, "invalid_argument", fmt.Sprintf("%s is not an audit export (%v)", file, err), "write one with 'palyra audit export -o FILE'")
	}
	var recs []*palyrav1.AuditRecord
	for {
		var r palyrav1.AuditRecord
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			return localFail(c, "journal_corrupt", fmt.Sprintf("%s: record after seq %d does not parse: %v", file, lastSeq(recs, hdr.BaseSeq), err), "")
		}
		recs = append(recs, &r)
	}
	trusted := strings.ToLower(strings.TrimSpace(c.String("head")))
	if c.IsSet("head") && (len(trusted) < 32 || len(trusted) > 64 || strings.Trim(trusted, "0123456789abcdef") != "") {
		return usageErr("--head %q: give the trusted head's sha256 in hex, all 64 digits (at least 32)", c.String("head"))
	}
	bad, problem := palyrav1.VerifyAuditChain(hdr.BaseSeq, hdr.BaseSHA256, recs)
	// The head the chain ends at, as computed (each record's hash was
	// checked above), not as the header claims it.
	end, endSeq := hdr.BaseSHA256, hdr.BaseSeq
	if len(recs) > 0 {
		end, endSeq = recs[len(recs)-1].Sha256, recs[len(recs)-1].Seq
	}
	if bad == 0 && (endSeq != hdr.HeadSeq || end != hdr.HeadSHA256) {
		bad, problem = max(endSeq, 1), "the chain does not end at the head the export names (records were cut off, or the header was changed)"
	}
	if bad == 0 && trusted != "" && !strings.HasPrefix(end, trusted) {
		bad, problem = endSeq, fmt.Sprintf("the export ends at head %s, not at the head you trust (%s): it was rewritten, or is of another journal or point in time", end, trusted)
	}
	if c.Bool("json") {
		_ = writeJSON(c.App.Writer, map[string]any{"ok": bad == 0, "records": len(recs), "first_bad_seq": bad, "problem": problem,
			"head_sha256": hdr.HeadSHA256, "against_trusted_head": trusted != ""})
	}
	if bad != 0 {
		return fail(c, &client.Error{Code: "journal_corrupt", Message: fmt.Sprintf("%s: record %d does not verify: %s", file, bad, problem)})
	}
	if !c.Bool("json") {
		fmt.Fprintf(c.App.Writer, "%s verified: %d records, seq %d..%d, head %s\n", file, len(recs), hdr.BaseSeq+1, hdr.HeadSeq, hdr.HeadSHA256)
		if trusted == "" {
			fmt.Fprintln(c.App.ErrWriter, "note: checked on its own only: a file rewritten whole verifies too; give the head you trust with --head (see --help)")
		}
	}
	return nil
}

func lastSeq(recs []*palyrav1.AuditRecord, base uint64) uint64 {
	if len(recs) == 0 {
		return base
	}
	return recs[len(recs)-1].Seq
}
