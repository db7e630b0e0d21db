package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// kvEntryJSON is a key and its value: text as is, anything else base64.
type kvEntryJSON struct {
	Key string `json:"key"`
	// Value is there for an empty value too (it was left out, so a
	// script read "no value"); a binary one is "" with ValueBase64 set,
	// as a job's output is.
	Value       string `json:"value"`
	ValueBase64 string `json:"value_base64,omitempty"`
	Size        int    `json:"size"`
}

func toKVJSON(e *palyrav1.KVEntry) kvEntryJSON {
	text, b64 := textOrBase64(e.Value)
	return kvEntryJSON{Key: e.Key, Value: text, ValueBase64: b64, Size: len(e.Value)}
}

// maxKVValueIn is how much 'kv put' reads from a file or stdin: one byte
// over the store's limit, so an oversized value is refused by name.
const maxKVValueIn = 64<<10 + 1

func kvCommand() *ucli.Command {
	stale := &ucli.BoolFlag{Name: "stale", Usage: "answer from this node's replica without asking the leader (faster; may lag behind)"}
	return &ucli.Command{
		Name:  "kv",
		Usage: "the replicated key-value store jobs use: read, seed and clean it",
		Description: `Jobs read and write the store through the guest SDK when submitted with
   --kv-prefix P (and the policy grants it). These commands are for operators
   (kv.read and kv.write in the policy): seed a key before a run, look at what
   jobs wrote, delete what is no longer needed.

     palyra kv put notes/greeting hello
     palyra kv get notes/greeting
     palyra kv list notes/
     palyra kv delete notes/greeting

   Keys are UTF-8, at most 512 bytes; values at most 64 KiB, stored byte for
   byte. Reads are linearizable unless --stale; writes are in the audit journal.

   A put or delete whose answer is lost (a leader change, a node stopping)
   is not sent again: another writer (a job, an operator) may have written
   the key since, and a second send would undo that. The error says so;
   read the key back with 'kv get' before writing it again.`,
		Subcommands: []*ucli.Command{
			{
				Name: "get", Usage: "print a key's value (byte for byte; --json: text or base64)", ArgsUsage: "KEY",
				Flags: []ucli.Flag{stale, jsonFlag},
				Action: func(c *ucli.Context) error {
					key, err := oneArg(c, "key")
					if err != nil {
						return err
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.KV.GetKV(c.Context, connect.NewRequest(&palyrav1.GetKVRequest{Key: key, Stale: staleRead(c)}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					e := resp.Msg.Entry
					if c.Bool("json") {
						return writeJSON(c.App.Writer, toKVJSON(e))
					}
					if _, err := c.App.Writer.Write(e.Value); err != nil {
						return err
					}
					if isTerminal(c.App.Writer) && len(e.Value) > 0 && !bytes.HasSuffix(e.Value, []byte("\n")) {
						fmt.Fprintln(c.App.Writer)
					}
					return nil
				},
			},
			{
				Name: "put", Usage: "set a key (the value from the argument, --from-file, or stdin with -; a value starting with - goes after --: palyra kv put -- KEY -1)", ArgsUsage: "KEY [VALUE|-]",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "from-file", Usage: "read the value from `FILE`"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					args := slices.DeleteFunc(c.Args().Slice(), func(a string) bool { return a == "--" })
					if len(args) == 0 || len(args) > 2 {
						return usageErr("give a key and a value: palyra kv put KEY VALUE (or - to read stdin, or --from-file FILE)")
					}
					key := args[0]
					if !utf8.ValidString(key) {
						// It failed in the client's encoder: "string field
						// contains invalid UTF-8".
						return usageErr("the key %q is not valid UTF-8: keys are text, e.g. notes/count", key)
					}
					var value []byte
					var err error
					switch f := c.String("from-file"); {
					case f != "" && len(args) == 2:
						return usageErr("give the value either as an argument or with --from-file, not both")
					case f != "":
						value, err = readCapped(func() (io.ReadCloser, error) { return os.Open(f) })
					case len(args) == 2 && args[1] == "-":
						if w := errJSONWriter(c); isTerminal(w) { // a prompt: shown under --json too
							fmt.Fprintln(w, "reading the value from stdin (end with Ctrl-D)…")
						}
						value, err = readCapped(func() (io.ReadCloser, error) { return io.NopCloser(c.App.Reader), nil })
					case len(args) == 2:
						value = []byte(args[1])
					default:
						return usageErr("no value: palyra kv put KEY VALUE (or - to read stdin, or --from-file FILE)")
					}
					if err != nil {
						return fail(c, &client.Error{Code: "invalid_argument", Message: err.Error()})
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					// Not sent again when its outcome is unknown: the key may
					// have been written by another since (kv help).
					if _, err := cl.KV.PutKV(c.Context, connect.NewRequest(&palyrav1.PutKVRequest{Key: key, Value: value})); err != nil {
						return fail(c, outcomeUnknown(cl.Explain(err), kvUnknownHint("write", key)))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"key": key, "size": len(value)})
					}
					fmt.Fprintf(c.App.Writer, "%s set (%s)\n", key, sizeText(uint64(len(value))))
					return nil
				},
			},
			{
				Name: "delete", Aliases: []string{"rm"}, Usage: "delete a key (a missing key is not an error)", ArgsUsage: "KEY",
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					key, err := oneArg(c, "key")
					if err != nil {
						return err
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					r, err := cl.KV.DeleteKV(c.Context, connect.NewRequest(&palyrav1.DeleteKVRequest{Key: key}))
					if err != nil {
						return fail(c, outcomeUnknown(cl.Explain(err), kvUnknownHint("delete", key)))
					}
					resp := r.Msg
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"key": key, "deleted": resp.Existed})
					}
					if !resp.Existed {
						fmt.Fprintf(c.App.Writer, "%s: no such key (nothing to delete)\n", key)
						return nil
					}
					fmt.Fprintf(c.App.Writer, "%s deleted\n", key)
					return nil
				},
			},
			{
				Name: "list", Aliases: []string{"ls"}, Usage: "list keys under a prefix, in key order", ArgsUsage: "[PREFIX]",
				Flags: []ucli.Flag{
					&ucli.BoolFlag{Name: "keys-only", Usage: "print the keys alone"},
					&ucli.IntFlag{Name: "limit", Value: 100, Usage: "show at most `N` keys (the rest: --after, or --all)"},
					&ucli.StringFlag{Name: "after", Usage: "start after `KEY` (the cursor the last page named)"},
					&ucli.BoolFlag{Name: "all", Usage: "every key under the prefix, however many"},
					stale, jsonFlag,
				},
				Action: kvList,
			},
		},
	}
}

// readCapped reads a value of at most the store's limit, refusing a
// larger one by name.
func readCapped(open func() (io.ReadCloser, error)) ([]byte, error) {
	r, err := open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxKVValueIn))
	if err != nil {
		return nil, err
	}
	if len(b) >= maxKVValueIn {
		return nil, fmt.Errorf("the value is over 64 KiB, the store's limit per key: store large data as a job's input or output instead")
	}
	return b, nil
}

func kvList(c *ucli.Context) error {
	if c.NArg() > 1 {
		return usageErr("give at most one prefix: palyra kv list [PREFIX]")
	}
	prefix, limit := c.Args().First(), c.Int("limit")
	if limit <= 0 {
		return usageErr("--limit is a number of keys, 1 or more")
	}
	all, keysOnly, asJSON := c.Bool("all"), c.Bool("keys-only"), c.Bool("json")
	if all && c.IsSet("limit") {
		return usageErr("--all lists every key and --limit at most N: give one of them")
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Text is printed a page at a time (--all may walk the whole store);
	// --json gathers one object.
	var out []any
	shown, header := 0, false
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	after, next := c.String("after"), ""
	for {
		page := min(limit-shown, 1000)
		if all {
			page = 1000
		}
		resp, err := cl.KV.ListKV(c.Context, connect.NewRequest(&palyrav1.ListKVRequest{Prefix: prefix, After: after,
			Limit: uint32(page), KeysOnly: keysOnly, Stale: staleRead(c)}))
		if err != nil {
			return fail(c, cl.Explain(err))
		}
		for _, e := range resp.Msg.Entries {
			shown++
			switch {
			case asJSON && keysOnly:
				out = append(out, map[string]string{"key": e.Key})
			case asJSON:
				out = append(out, toKVJSON(e))
			case keysOnly:
				fmt.Fprintln(c.App.Writer, printableText(e.Key))
			default:
				if !header {
					fmt.Fprintln(tw, "KEY\tSIZE\tVALUE")
					header = true
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\n", printableText(e.Key), len(e.Value), valuePreview(e.Value))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		next = resp.Msg.Next
		if next == "" || (!all && shown >= limit) {
			break
		}
		after = next
	}
	if asJSON {
		if out == nil {
			out = []any{}
		}
		return writeJSON(c.App.Writer, map[string]any{"entries": out, "next": next})
	}
	if shown == 0 {
		where := "in the store"
		if prefix != "" {
			where = fmt.Sprintf("under %q", prefix)
		}
		fmt.Fprintf(c.App.ErrWriter, "no keys %s\n", where)
		return nil
	}
	if next != "" {
		// The next page's command keeps this one's flags.
		more := ""
		if c.IsSet("limit") {
			more += fmt.Sprintf(" --limit %d", limit)
		}
		if keysOnly {
			more += " --keys-only"
		}
		fmt.Fprintf(c.App.ErrWriter, "more keys follow: palyra kv list %s--after %q%s (or --all)\n", prefixArg(prefix), next, more)
	}
	return nil
}

func prefixArg(p string) string {
	if p == "" {
		return ""
	}
	return fmt.Sprintf("%q ", p)
}

// valuePreview is a value on one line: text up to 60 characters,
// control characters escaped; binary as its size.
func valuePreview(v []byte) string {
	if !utf8.Valid(v) {
		return fmt.Sprintf("(binary, %d bytes: --json shows it in base64)", len(v))
	}
	s := strings.Trim(fmt.Sprintf("%q", string(v)), `"`)
	if r := []rune(s); len(r) > 60 {
		s = string(r[:57]) + "..."
	}
	return s
}
