package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// cliStdin is cli with stdin.
func (c *cluster) cliStdin(stdin string, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, append([]string{"palyra", "--data-dir", c.dir, "--addr", c.node.Addr()}, args...), strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// What a new user types: 'echo x | palyra secret set' stores the newline
// (as other tools do) but says so; --trim-newline leaves it out; an empty
// or invalid name and a job asking for a secret that does not exist are
// refused with the reason.
func TestSecretSetAsUsersTypeIt(t *testing.T) {
	c := startNode(t)
	if r := c.cliStdin("x\n", "secret", "set", ""); r.code != 2 || !strings.Contains(r.stderr, "secret name is empty") || strings.Contains(r.stderr, "got 1") {
		t.Fatalf("secret set '': %+v; want a usage error saying the name is empty", r)
	}
	r := c.cliStdin("x\n", "secret", "set", "echoed")
	if r.code != 0 || !strings.Contains(r.stdout, "(2 B)") ||
		!strings.Contains(r.stderr, "warning: stored 2 bytes ending in a newline; use printf or --trim-newline to leave it out") {
		t.Fatalf("echo x | secret set: %+v; want the 2 bytes stored and a warning", r)
	}
	if r := c.cliStdin("x", "secret", "set", "printed"); r.code != 0 || !strings.Contains(r.stdout, "(1 B)") || strings.Contains(r.stderr, "warning") {
		t.Fatalf("printf x | secret set: %+v; want 1 byte, no warning", r)
	}
	for _, in := range []string{"x\n", "x\r\n"} {
		if r := c.cliStdin(in, "secret", "set", "trimmed", "--trim-newline"); r.code != 0 || !strings.Contains(r.stdout, "(1 B)") || strings.Contains(r.stderr, "warning") {
			t.Fatalf("%q | secret set --trim-newline: %+v; want 1 byte, no warning", in, r)
		}
	}
	if r := c.cliStdin("\n", "secret", "set", "blank", "--trim-newline"); r.code != 2 || !strings.Contains(r.stderr, "only a newline") {
		t.Fatalf("a lone newline with --trim-newline: %+v", r)
	}
	if r := c.cliStdin("x", "secret", "set", "bad name!"); r.code != 1 || !strings.Contains(r.stderr, "letters, digits, '.', '_' or '-'") {
		t.Fatalf("secret set 'bad name!': %+v; want a refusal naming the rule", r)
	}
	if r := c.cli("secret", "list"); strings.Contains(r.stdout, "bad name") {
		t.Fatalf("the invalid name was stored: %s", r.stdout)
	}
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "hi", "--secret", "nosuch", "--secret", "printed")
	if r.code != 1 || !strings.Contains(r.stderr, `no secret named "nosuch"`) || !strings.Contains(r.stderr, "palyra secret list") {
		t.Fatalf("job submit --secret nosuch: %+v; want a refusal naming the secret and 'palyra secret list'", r)
	}
	if r := c.cli("job", "list", "--json"); strings.Contains(r.stdout, `"id"`) {
		t.Fatalf("a job was recorded: %s", r.stdout)
	}
}
