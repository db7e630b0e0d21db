package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func browserCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "browser",
		Usage: "interactive browser sessions on the workers: open one, drive it step by step, look, close it",
		Description: `A session is a browser context of its own (cookies, storage, cache) on one
   worker with Chromium, driven one call at a time from any node: the way an
   agent uses a browser. 'observe' returns a compact list of the page's
   elements, each with a ref (e0, e1, …) that later steps can target instead
   of a CSS selector. Sessions close after 10 minutes idle or 30 minutes in
   all, allow 256 actions, and live only in their worker's memory: when it
   dies, calls to them fail.

   Example:
     ID=$(palyra browser open --allow-host shop.example)
     palyra browser do $ID 'navigate https://shop.example/login' observe
     palyra browser do $ID 'type e3 ada' 'type e4 hunter2' 'click e5' 'wait_for #welcome' observe
     palyra browser screenshot $ID -o now.png
     palyra browser close $ID`,
		Subcommands: []*ucli.Command{
			{
				Name: "open", Usage: "open a session on a worker with a free browser slot; prints its id",
				Flags: []ucli.Flag{
					&ucli.StringSliceFlag{Name: "allow-host", Usage: "`HOST` the session may reach, subdomains included (repeatable)"},
					&ucli.BoolFlag{Name: "allow-private", Usage: "also allow private, loopback and link-local addresses"},
					&ucli.StringFlag{Name: "node", Usage: "open it on this worker `ID` (default: any with a browser)"},
					jsonFlag,
				},
				Action: browserOpen,
			},
			{
				Name: "do", Usage: "run steps in a session, in order, and print what they return", ArgsUsage: "ID STEP…",
				Description: `Each STEP is one argument (quote it):
     observe                    the page's elements, each with a ref
     navigate URL               load a page (15s)
     click TARGET               TARGET: a ref from observe (e12) or a CSS selector
     type TARGET TEXT…          type text (at most 4 KiB) into the element
     press KEY                  Enter, Tab, Escape, a character…
     wait_for TARGET            until the element is visible
     wait_text TEXT…            until the page's text contains TEXT
     extract TARGET [NAME]      the element's text, printed as NAME (default stepN)
     evaluate EXPRESSION…       a JavaScript expression's value, printed as stepN
     screenshot [NAME.png]      a PNG, written to --output-dir (default stepN.png)
     pdf [NAME.pdf]             the page as PDF, written to --output-dir (default stepN.pdf)
     {"action": …}              any step as JSON (runtime/browser/SCRIPT.md)
   N is the step's place in the call, from 0; two steps of one call may not
   use the same name. Steps other than navigate get 5s each. TEXT… and
   EXPRESSION… are taken as written, spaces and newlines kept; a TARGET with
   spaces goes in quotes within the step: "type 'form #user' ada".
   Limits: 64 steps per call, 256 per session; observe lists at most 200
   elements (name the others by CSS selector); a
   screenshot step's PNG at most 256 KiB ('palyra browser screenshot'
   falls back to JPEG).`,
				Flags:  []ucli.Flag{&ucli.StringFlag{Name: "output-dir", Usage: "write screenshots and PDFs the steps make to `DIR`", Value: "."}, jsonFlag},
				Action: browserDo,
			},
			{
				Name: "screenshot", Usage: "save a screenshot of the session's page", ArgsUsage: "ID",
				Description: `A PNG of the viewport. A PNG over the session limit (256 KiB) comes
   back as JPEG instead, written with a .jpg extension.`,
				Flags:  []ucli.Flag{&ucli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write it to `FILE` (default screenshot.png; - for stdout)"}, jsonFlag},
				Action: browserScreenshot,
			},
			{
				Name: "close", Usage: "close a session and dispose of its browser context", ArgsUsage: "ID",
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					id, err := oneArg(c, "session id")
					if err != nil {
						return err
					}
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					if _, err := cl.Browser.CloseSession(c.Context, connect.NewRequest(&palyrav1.BrowserSessionRef{Id: id})); err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]string{"closed": id})
					}
					fmt.Fprintf(c.App.Writer, "%s closed\n", id)
					return nil
				},
			},
			{
				Name: "list", Usage: "list your open sessions (an operator's: everyone's)", Flags: []ucli.Flag{jsonFlag},
				Action: browserList,
			},
		},
	}
}

func browserOpen(c *ucli.Context) error {
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Browser.OpenSession(c.Context, connect.NewRequest(&palyrav1.OpenBrowserSessionRequest{
		AllowHosts: c.StringSlice("allow-host"), AllowPrivate: c.Bool("allow-private"), NodeId: c.String("node")}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	s := resp.Msg.Session
	if c.Bool("json") {
		return writeJSON(c.App.Writer, sessionJSON(s))
	}
	fmt.Fprintln(c.App.Writer, s.Id)
	if isTerminal(c.App.ErrWriter) {
		fmt.Fprintf(c.App.ErrWriter, "session on %s; drive it with 'palyra browser do %s observe'\n", s.NodeId, s.Id)
	}
	return nil
}

var stepRef = regexp.MustCompile(`^e[0-9]{1,6}$`)

// target is a step's element: a ref from observe or a CSS selector.
func target(m map[string]any, t string) {
	if stepRef.MatchString(t) {
		m["ref"] = t
	} else {
		m["selector"] = t
	}
}

// cutWord splits s into its first word and the rest, which keeps its
// own spaces and newlines (only the blanks between the two go). A word
// that starts with a quote (' or ") runs to the matching quote, so a
// selector with spaces can be one word: "type 'form #user' ada".
func cutWord(s string) (word, rest string, err error) {
	s = strings.TrimLeft(s, " \t\r\n")
	if s != "" && (s[0] == '\'' || s[0] == '"') {
		end := strings.IndexByte(s[1:], s[0])
		if end < 0 {
			return "", "", fmt.Errorf("%c opens a quoted word that is never closed", s[0])
		}
		return s[1 : 1+end], strings.TrimLeft(s[2+end:], " \t\r\n"), nil
	}
	if k := strings.IndexAny(s, " \t\r\n"); k >= 0 {
		return s[:k], strings.TrimLeft(s[k:], " \t\r\n"), nil
	}
	return s, "", nil
}

// parseStep turns STEP argument i into a step object. A value or file it
// does not name is named by i, as a browser job names unnamed artifacts,
// so two steps of one call never write the same name. Text and
// expressions are taken as written, spaces and newlines kept (they were
// split into words and joined by one space: "a  b" typed "a b", and a
// "//" comment swallowed the lines after it).
func parseStep(i int, arg string) (map[string]any, error) {
	if strings.HasPrefix(strings.TrimSpace(arg), "{") {
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(arg)), &m); err != nil {
			return nil, fmt.Errorf("step %q is not a JSON object: %v", arg, err)
		}
		return m, nil
	}
	action, rest, _ := cutWord(arg)
	if action == "" {
		return nil, fmt.Errorf("empty step")
	}
	fail := func(usage string) (map[string]any, error) {
		return nil, fmt.Errorf("step %q: usage: %s", arg, usage)
	}
	// one takes the single word a step needs; more is a mistake, not
	// something to drop.
	one := func(usage string) (string, error) {
		w, more, err := cutWord(rest)
		if err != nil {
			return "", fmt.Errorf("step %q: %v", arg, err)
		}
		if w == "" || more != "" {
			return "", fmt.Errorf("step %q: usage: %s", arg, usage)
		}
		return w, nil
	}
	m := map[string]any{"action": action}
	switch action {
	case "observe":
		if strings.TrimSpace(rest) != "" {
			return nil, fmt.Errorf("step %q: observe takes nothing", arg)
		}
	case "navigate":
		u, err := one("navigate URL")
		if err != nil {
			return nil, err
		}
		m["url"] = u
	case "click", "wait_for":
		t := strings.TrimSpace(rest)
		if q, more, err := cutWord(t); err == nil && more == "" && t != "" && (t[0] == '\'' || t[0] == '"') {
			t = q
		}
		if t == "" {
			return fail(action + " TARGET")
		}
		target(m, t)
	case "type":
		t, text, err := cutWord(rest)
		if err != nil {
			return nil, fmt.Errorf("step %q: %v", arg, err)
		}
		if t == "" || text == "" {
			return fail("type TARGET TEXT (a TARGET with spaces in quotes)")
		}
		target(m, t)
		m["text"] = text
	case "press":
		k, err := one("press KEY")
		if err != nil {
			return nil, err
		}
		m["key"] = k
	case "wait_text":
		if strings.TrimSpace(rest) == "" {
			return fail("wait_text TEXT")
		}
		m["action"], m["text"] = "wait_for", rest
	case "extract":
		t, name, err := cutWord(rest)
		if err != nil {
			return nil, fmt.Errorf("step %q: %v", arg, err)
		}
		if t == "" {
			return fail("extract TARGET [NAME] (a TARGET with spaces in quotes)")
		}
		target(m, t)
		m["name"] = fmt.Sprintf("step%d", i)
		if name != "" {
			if strings.ContainsAny(name, " \t\r\n") {
				return fail("extract TARGET [NAME]: a TARGET with spaces goes in quotes, e.g. extract 'main h1' title")
			}
			m["name"] = name
		}
	case "evaluate":
		if strings.TrimSpace(rest) == "" {
			return fail("evaluate EXPRESSION")
		}
		m["expression"], m["name"] = rest, fmt.Sprintf("step%d", i)
	case "screenshot", "pdf":
		ext := ".png"
		if action == "pdf" {
			ext = ".pdf"
		}
		m["name"] = fmt.Sprintf("step%d%s", i, ext)
		if strings.TrimSpace(rest) != "" {
			n, err := one(action + " [NAME]")
			if err != nil {
				return nil, err
			}
			m["name"] = n
		}
	default:
		return nil, fmt.Errorf("unknown step %q; steps: observe, navigate, click, type, press, wait_for, wait_text, extract, evaluate, screenshot, pdf (see 'palyra browser do --help')", action)
	}
	return m, nil
}

// relabelWaitText names the steps at waitText in msg as the user wrote
// them, wait_text: they go to the worker as wait_for steps, and its errors
// say "steps[N] (wait_for)".
func relabelWaitText(msg string, waitText []int) string {
	for _, i := range waitText {
		msg = strings.Replace(msg, fmt.Sprintf("steps[%d] (wait_for)", i), fmt.Sprintf("steps[%d] (wait_text)", i), 1)
	}
	return msg
}

func browserDo(c *ucli.Context) error {
	if c.NArg() < 2 {
		return usageErr("browser do takes a session id and at least one step, e.g. palyra browser do ID observe")
	}
	id := c.Args().First()
	var steps [][]byte
	var waitText []int // the steps written wait_text, sent as wait_for
	for i, a := range c.Args().Slice()[1:] {
		m, err := parseStep(i, a)
		if err != nil {
			return usageErr("%v", err)
		}
		if strings.HasPrefix(strings.TrimSpace(a), "wait_text") {
			waitText = append(waitText, i)
		}
		b, _ := json.Marshal(m)
		steps = append(steps, b)
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Browser.Do(c.Context, connect.NewRequest(&palyrav1.BrowserDoRequest{Id: id, Steps: steps}))
	if err != nil {
		e := cl.Explain(err)
		e.Message = relabelWaitText(e.Message, waitText)
		return fail(c, e)
	}
	r := resp.Msg
	var written []string
	if len(r.Files) > 0 {
		if err := os.MkdirAll(c.String("output-dir"), 0o755); err != nil {
			return fail(c, &client.Error{Code: "io", Message: err.Error()})
		}
	}
	for _, f := range r.Files {
		path := filepath.Join(c.String("output-dir"), filepath.Base(f.Name))
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			return fail(c, &client.Error{Code: "io", Message: err.Error()})
		}
		written = append(written, path)
	}
	if c.Bool("json") {
		if written == nil {
			written = []string{}
		}
		out := map[string]any{"session": sessionJSON(r.Session), "observations": r.Observations, "files": written, "notes": nonNil(r.Notes)}
		if len(r.Values) > 0 {
			out["values"] = json.RawMessage(r.Values)
		}
		return writeJSON(c.App.Writer, out)
	}
	for _, o := range r.Observations {
		fmt.Fprintln(c.App.Writer, o)
	}
	if len(r.Values) > 0 && !bytes.Equal(r.Values, []byte("{}")) {
		var buf bytes.Buffer
		json.Indent(&buf, r.Values, "", "  ")
		fmt.Fprintln(c.App.Writer, buf.String())
	}
	for _, p := range written {
		fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(c.App.ErrWriter, "note: %s\n", n)
	}
	return nil
}

func browserScreenshot(c *ucli.Context) error {
	id, err := oneArg(c, "session id")
	if err != nil {
		return err
	}
	if c.String("output") == "-" && c.Bool("json") {
		return usageErr("-o - and --json both write to stdout: give -o FILE with --json")
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Browser.Screenshot(c.Context, connect.NewRequest(&palyrav1.BrowserSessionRef{Id: id}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	out := c.String("output")
	if out == "" {
		out = "screenshot.png"
	}
	note := ""
	if resp.Msg.MediaType == "image/jpeg" {
		// The page's PNG was over the session limit: the bytes are a JPEG,
		// and a .png name would mislead whatever opens the file.
		if ext := filepath.Ext(out); out != "-" && (strings.EqualFold(ext, ".png") || ext == "") {
			out = strings.TrimSuffix(out, ext) + ".jpg"
		}
		note = " (a JPEG: the page's PNG was over the session's screenshot limit)"
	}
	if out, err = writeFileOrStdout(c, out, resp.Msg.Data); err != nil {
		return fail(c, &client.Error{Code: "io", Message: err.Error()})
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{"file": out, "media_type": resp.Msg.MediaType, "bytes": len(resp.Msg.Data)})
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s (%s, %d bytes)%s\n", out, resp.Msg.MediaType, len(resp.Msg.Data), note)
	return nil
}

func sessionJSON(s *palyrav1.BrowserSession) map[string]any {
	if s == nil {
		return nil
	}
	return map[string]any{"id": s.Id, "node_id": s.NodeId, "owner": s.Owner, "allow_hosts": s.AllowHosts, "allow_private": s.AllowPrivate,
		"created_at": msTime(s.CreatedAtMs), "last_used_at": msTime(s.LastUsedAtMs), "actions": s.Actions, "url": s.Url}
}

func browserList(c *ucli.Context) error {
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Browser.ListSessions(c.Context, connect.NewRequest(&palyrav1.ListBrowserSessionsRequest{}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	if c.Bool("json") {
		list := []map[string]any{}
		for _, s := range resp.Msg.Sessions {
			list = append(list, sessionJSON(s))
		}
		return writeJSON(c.App.Writer, map[string]any{"sessions": list, "unreachable": resp.Msg.Unreachable})
	}
	if len(resp.Msg.Sessions) == 0 {
		fmt.Fprintln(c.App.Writer, "no open sessions (open one with 'palyra browser open --allow-host HOST')")
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	if len(resp.Msg.Sessions) > 0 {
		fmt.Fprintln(tw, "SESSION\tNODE\tOWNER\tACTIONS\tIDLE\tURL")
	}
	for _, s := range resp.Msg.Sessions {
		idle := time.Since(time.UnixMilli(s.LastUsedAtMs)).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", s.Id, s.NodeId, s.Owner, s.Actions, idle, s.Url)
	}
	tw.Flush()
	for _, n := range resp.Msg.Unreachable {
		fmt.Fprintf(c.App.ErrWriter, "worker %s did not answer; its sessions are not listed\n", n)
	}
	return nil
}
