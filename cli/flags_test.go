package cli

import (
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
		// A negative argument reads as an unknown flag.
		{[]string{"job", "retention", "-2h"}, `"-2h" reads as a flag (it starts with -): to pass it as an argument, put -- before the arguments`},
		{[]string{"kv", "put", "k", "-1"}, `"-1" reads as a flag`},
		{[]string{"job", "retention", "--bogus"}, "unknown flag --bogus"},
	} {
		r := runCLI(t, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "USAGE:") {
			t.Errorf("%v: exit %d, stderr %q; want usage exit and %q in one line", c.args, r.code, r.stderr, c.want)
		}
	}
}
