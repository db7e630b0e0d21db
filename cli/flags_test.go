package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A flag value that does not parse gets one line saying what the flag
// wants (urfave/cli printed the whole help page after "parse error"), and
// a negative duration is refused wherever it is given (several were taken
// silently and ignored).
func TestBadFlagValuesSayWhatTheyWant(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pair", "create", "--ttl", "100d"}, `invalid value "100d" for --ttl: want a duration such as 90s, 15m or 12h`},
		{[]string{"--call-timeout", "5x", "status"}, `invalid value "5x" for --call-timeout: want a duration`},
		{[]string{"job", "submit", "--wasm", "x.wasm", "--priority", "high"}, `invalid value "high" for --priority: want a whole number`},
		{[]string{"job", "submit", "--wasm", "x.wasm", "--wait-timeout", "-3s"}, "--wait-timeout -3s is negative"},
		{[]string{"--dial-timeout", "-1s", "status"}, "--dial-timeout -1s is negative"},
		// Under a millisecond went out as 0, "the default" (a 30s timeout,
		// no deadline).
		{[]string{"job", "submit", "--wasm", "x.wasm", "--timeout", "500us"}, "--timeout 500µs is under a millisecond"},
		{[]string{"job", "submit", "--wasm", "x.wasm", "--deadline", "999us"}, "--deadline 999µs is under a millisecond"},
		// An argument to a command that takes none was ignored: 'node leave
		// n-2' made the local node leave.
		{[]string{"node", "leave", "n-2"}, `unexpected argument "n-2": 'palyra node leave' takes no arguments`},
		{[]string{"pair", "create", "node"}, `unexpected argument "node": 'palyra pair create' takes no arguments`},
		{[]string{"status", "x"}, `unexpected argument "x"`},
		{[]string{"node", "list"}, `'list' is not a command of 'palyra node'. Did you mean 'palyra nodes'?`},
		{[]string{"version", "x"}, `unexpected argument "x"`},
		// A negative argument reads as an unknown flag.
		{[]string{"job", "retention", "-2h"}, `"-2h" reads as a flag (it starts with -): to pass it as an argument, put -- before the arguments`},
		{[]string{"kv", "put", "k", "-1"}, `"-1" reads as a flag`},
		{[]string{"job", "retention", "--bogus"}, "unknown flag --bogus"},
		// A required flag left out: one line naming it and what it takes
		// (the whole help page was printed, then 'Required flag "peer" not set').
		{[]string{"device", "pair", "--code", "X"}, "--peer is required: a node's address HOST:PORT"},
		{[]string{"job", "prune"}, "--older-than is required: remove jobs that ended more than DURATION ago"},
		{[]string{"job", "list", "--limit", "-3"}, `invalid value "-3" for --limit: want a whole number from 1 to 1000`},
		{[]string{"job", "list", "--limit"}, "--limit needs a value"},
		{[]string{"job", "deny", "j-1", "--reason", ""}, "--reason is empty: it is required and needs a value"},
		{[]string{"secret", "set", "x", "--from-file", "/dev/null"}, "/dev/null is empty: a secret needs a value"},
		{[]string{"--data-dir", t.TempDir(), "node", "start", "--log-level", "bogus"}, `--log-level "bogus": use debug, info, warn or error`},
		{[]string{"job", "prune", "--older-than", " "}, "--older-than is empty"},
		{[]string{"kv", "put", "bad\xff", "v"}, `the key "bad\xff" is not valid UTF-8`},
		{[]string{"audit", "list", "--limit", "1001"}, "--limit 1001: a page holds 1 to 1000 records"},
		{[]string{"job", "submit", "--wasm", "x.wasm", "--timeout", "48h"}, "--timeout 48h0m0s is over the 24h a job may run"},
		// An --addr that cannot name a node (it was dialled, and the failure
		// said to check that a node runs there).
		{[]string{"--data-dir", t.TempDir(), "--addr", "127.0.0.1:99999", "status"}, `--addr "127.0.0.1:99999": port "99999" is not a number from 1 to 65535`},
	} {
		r := runCLI(t, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "USAGE:") {
			t.Errorf("%v: exit %d, stderr %q; want usage exit and %q in one line", c.args, r.code, r.stderr, c.want)
		}
	}
}

// Under --json every error is one JSON object on stderr, usage errors
// included (they were text, so a script parsing stderr as JSON failed on
// a misspelt flag); without --json the text is unchanged.
func TestUsageErrorsAreJSONUnderJSON(t *testing.T) {
	for _, c := range []struct {
		args          []string
		message, hint string
	}{
		{[]string{"job", "submit", "--wasm", "x.wasm", "--wiat", "--json"}, "unknown flag --wiat: did you mean --wait?", "run 'palyra job submit --help' for usage"},
		{[]string{"job", "sumbit", "--json"}, `'sumbit' is not a command of 'palyra job'`, "run 'palyra job --help' for its commands"},
		{[]string{"job", "list", "--limit", "0", "--json=true"}, "--limit 0: a page holds 1 to 1000 jobs", ""},
		{[]string{"job", "submit", "--json"}, "give exactly one of --wasm FILE or --browser SCRIPT.json", ""},
	} {
		r := runCLI(t, c.args...)
		var got struct{ Error errorJSON }
		if err := json.Unmarshal([]byte(r.stderr), &got); err != nil {
			t.Errorf("%v: stderr is not one JSON object (%v): %q", c.args, err, r.stderr)
			continue
		}
		if r.code != exitUsage || got.Error.Code != "usage" || !strings.HasPrefix(got.Error.Message, c.message) || got.Error.Hint != c.hint {
			t.Errorf("%v: exit %d, error %+v; want usage exit, message %q…, hint %q", c.args, r.code, got.Error, c.message, c.hint)
		}
	}
	for _, args := range [][]string{
		{"job", "list", "--limit", "0", "--json=false"},
		{"job", "submit", "--wasm", "x.wasm", "--", "--json"}, // an argument, not the flag
	} {
		if r := runCLI(t, args...); r.code != exitUsage || !strings.HasPrefix(r.stderr, "error: ") {
			t.Errorf("%v: exit %d, stderr %q; want a text usage error", args, r.code, r.stderr)
		}
	}
}

func TestTextErrorShape(t *testing.T) {
	got := textError("error: job j-1 failed: exit 3\nmore detail\nhint: raise it with --timeout\n", exitFailure)
	want := errorJSON{Code: "failed", Message: "job j-1 failed: exit 3\nmore detail", Hint: "raise it with --timeout"}
	if got != want {
		t.Errorf("textError = %+v, want %+v", got, want)
	}
}

// node start refuses values it would have changed or mistaken (slots 0 or
// -1 became the default, a negative prefetch and a zero lease were taken,
// a wildcard --advertise wrote a new cluster, then failed), before it
// writes anything to the data dir.
func TestNodeStartRefusesBadValuesBeforeWriting(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--wasm-slots", "0"}, "--wasm-slots 0: give 1 to"},
		{[]string{"--wasm-slots", "-1"}, "--wasm-slots -1: give 1 to"},
		{[]string{"--browser-slots", "-2"}, "or -1 to run no browser jobs"},
		{[]string{"--prefetch", "-1"}, "--prefetch -1: give 0 (none) to"},
		{[]string{"--array-prefetch", "-3"}, "--array-prefetch -3"},
		{[]string{"--lease-ttl", "0"}, "--lease-ttl 0s: give 1s to 1h"},
		{[]string{"--advertise", "0.0.0.0:7430"}, "is a wildcard"},
		{[]string{"--advertise", "10.0.0.5"}, "is not HOST:PORT"},
		{[]string{"--advertise", "10.0.0.5:0"}, "is not a number from 1 to 65535"},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		r := runCLI(t, append([]string{"--data-dir", dir, "node", "start"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want usage exit and %q", c.args, r.code, r.stderr, c.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%v: the data dir was written (%v)", c.args, err)
		}
	}
}

// 'CMD help' shows a command's help, for commands that take no
// arguments too (the argument check refused "help").
func TestHelpWordAfterACommand(t *testing.T) {
	for _, args := range [][]string{{"status", "help"}, {"node", "leave", "help"}, {"job", "list", "h"}, {"version", "help"}} {
		if r := runCLI(t, args...); r.code != 0 || !strings.Contains(r.stdout, "USAGE:") {
			t.Errorf("%v: %+v", args, r)
		}
	}
	if r := runCLI(t, "node", "recover", "x"); r.code != exitUsage || !strings.Contains(r.stderr, "name the node with --data-dir") {
		t.Errorf("node recover x: %+v", r)
	}
}

// Every list command answers to ls and every delete or remove to rm, as
// kv's did alone.
func TestShortNames(t *testing.T) {
	for _, args := range [][]string{{"job", "ls"}, {"secret", "ls"}, {"secret", "rm"}, {"skill", "rm"}, {"hook", "ls"}, {"kv", "ls"}, {"kv", "rm"}, {"device", "ls"}} {
		r := runCLI(t, append(args, "--help")...)
		if r.code != 0 || !strings.Contains(r.stdout, "NAME:") {
			t.Errorf("%v --help: %+v", args, r)
		}
	}
}

// skill keygen with stdout not a terminal says where the public key went
// ("the line above" was not on screen).
func TestKeygenSaysWhereThePublicKeyWent(t *testing.T) {
	r := runCLI(t, "skill", "keygen", "-o", filepath.Join(t.TempDir(), "k.pem"))
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ed25519:") || !strings.Contains(r.stderr, "the public key went to stdout") {
		t.Fatalf("keygen: %+v", r)
	}
}

// --version and 'palyra version' print the same line.
func TestVersionFlagMatchesVersionCommand(t *testing.T) {
	a, b := runCLI(t, "--version"), runCLI(t, "version")
	if a.code != 0 || a.stdout != b.stdout || !strings.HasPrefix(a.stdout, "palyra ") {
		t.Fatalf("--version %q, version %q", a.stdout, b.stdout)
	}
}
