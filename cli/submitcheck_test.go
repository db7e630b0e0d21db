package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// Submit flags whose values the request cannot carry are refused, in one
// line with the usage code, before anything is read or sent: --priority
// wrapped to 32 bits (99999999999 was stored as 1215752191, 4294967295
// as -1), a number too large for its flag said "for flag -fuel" with one
// dash, --kv-prefix "" silently meant no grant, and "zone!=mars" was read
// as the key "zone!" (the job waited for ever).
func TestSubmitRefusesFlagValuesItCannotCarry(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--priority", "99999999999"}, "--priority 99999999999 is out of range: give a whole number from -2147483648 to 2147483647"},
		{[]string{"--priority", "4294967295"}, "--priority 4294967295 is out of range"},
		{[]string{"--priority", "-2147483649"}, "--priority -2147483649 is out of range"},
		{[]string{"--priority", "99999999999999999999"}, `invalid value "99999999999999999999" for --priority: out of range: want a whole number from -2147483648 to 2147483647`},
		{[]string{"--fuel", "99999999999999999999"}, `invalid value "99999999999999999999" for --fuel: out of range: want a whole number from 0 to 18446744073709551615`},
		{[]string{"--retries", "4294967297"}, "--retries 4294967297 is over the limit of 10"},
		{[]string{"--kv-prefix", ""}, "empty key-value prefix name in --kv-prefix"},
		{[]string{"--constraint", "zone!=mars"}, `--constraint "zone!=mars": constraints are equality only (k=v), not !=`},
		{[]string{"--constraint", "zone==mars"}, "equality only (k=v), not =="},
	} {
		r := runCLI(t, append([]string{"job", "submit", "--wasm", "missing.wasm"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "flag -") || strings.Contains(r.stderr, "USAGE:") {
			t.Errorf("%v: exit %d, stderr %q; want usage exit and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	// In range, the values pass these checks (and fail on the missing file).
	for _, args := range [][]string{{"--priority", "2147483647"}, {"--priority", "-2147483648"}, {"--constraint", "zone=eu-1"}, {"--constraint", "room=lab 2"}, {"--kv-prefix", "app/"}} {
		r := runCLI(t, append([]string{"job", "submit", "--wasm", "missing.wasm"}, args...)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "cannot read module") {
			t.Errorf("%v: exit %d, stderr %q; want the missing module as the only error", args, r.code, r.stderr)
		}
	}
	if r := runCLI(t, "job", "submit", "--help"); !strings.Contains(r.stdout, "at most 24h") {
		t.Errorf("job submit --help does not say --timeout's maximum: %s", r.stdout)
	}
}

// A label that looks like another comparison is refused on node start (no
// constraint could match it); one outside the label rule is kept with a
// warning, since a node labelled so before the rule must still start.
func TestParseLabelsRefusesWhatNoConstraintCanMatch(t *testing.T) {
	if l, w, err := parseLabels([]string{"zone=eu-1", "topology.example.com/rack=r1:a", "gpu="}); err != nil || len(l) != 3 || len(w) != 0 {
		t.Fatalf("good labels: %v %v %v", l, w, err)
	}
	if _, w, err := parseLabels([]string{"zone=eu\x1b[2J"}); err != nil || len(w) != 1 || !strings.Contains(w[0], "control character") {
		t.Errorf("a label with a control character: %v %v, want it kept with a warning (a node so labelled must still start)", w, err)
	}
	for _, bad := range []string{"zone!=mars", "palyra.ca=x", "novalue"} {
		if _, _, err := parseLabels([]string{bad}); err == nil {
			t.Errorf("label %q accepted", bad)
		}
	}
	for _, old := range []string{"zo ne=a", "zone=a b", "-x=1"} {
		l, w, err := parseLabels([]string{old})
		if err != nil || len(l) != 1 || len(w) != 1 || !strings.Contains(w[0], "kept") {
			t.Errorf("label %q: %v %v %v, want it kept with a warning", old, l, w, err)
		}
	}
}

// Module and array input errors name what to do: a module over the limit
// names the 16 MiB limit (the hint was "pass an existing .wasm file"); a
// line of --inputs over the per-task limit is named by its line number
// and file (it was "input 0" from the node); a subdirectory of
// --input-dir, skipped, is noted on stderr.
func TestSubmitInputErrorsNameTheFix(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.wasm")
	if err := os.WriteFile(big, nil, 0o600); err != nil || os.Truncate(big, 17<<20) != nil {
		t.Fatal("sparse module")
	}
	r := runCLI(t, "job", "submit", "--wasm", big)
	if r.code != exitFailure || !strings.Contains(r.stderr, "hint: a module may be at most 16.0 MiB") || strings.Contains(r.stderr, "pass an existing") {
		t.Errorf("a 17 MiB module: %+v", r)
	}

	lines := filepath.Join(dir, "in.txt")
	os.WriteFile(lines, append(append([]byte("small\n"), bytes.Repeat([]byte("x"), 1<<20+1)...), "\nsmall\n"...), 0o600)
	// No node answers at this address: these are refused before the call.
	nowhere := []string{"--data-dir", filepath.Join(dir, "nodata"), "--config-dir", filepath.Join(dir, "noconfig"), "--addr", "127.0.0.1:1"}
	r = runCLI(t, append(nowhere, "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", lines)...)
	if r.code != exitFailure || !strings.Contains(r.stderr, "line 2 of "+lines+" is 1048577 bytes") || !strings.Contains(r.stderr, "the limit is 1.0 MiB per task") {
		t.Errorf("an oversized line of --inputs: %+v", r)
	}

	in := filepath.Join(dir, "in")
	os.MkdirAll(filepath.Join(in, "sub1"), 0o700)
	os.MkdirAll(filepath.Join(in, "sub2"), 0o700)
	os.MkdirAll(filepath.Join(in, ".hidden"), 0o700)
	os.WriteFile(filepath.Join(in, "a.txt"), []byte("a"), 0o600)
	r = runCLI(t, append(nowhere, "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input-dir", in)...)
	if !strings.Contains(r.stderr, "note: --input-dir "+in+": skipped 2 subdirectories;") {
		t.Errorf("subdirectories of --input-dir skipped without a note: %+v", r)
	}

	// An oversized file of --input-dir gets the hint an oversized line
	// of --inputs gets; a directory given to --inputs, --input-dir's.
	huge := filepath.Join(dir, "huge")
	os.MkdirAll(huge, 0o700)
	os.WriteFile(filepath.Join(huge, "a"), []byte("a"), 0o600)
	os.WriteFile(filepath.Join(huge, "b"), bytes.Repeat([]byte("x"), 2<<20), 0o600)
	r = runCLI(t, append(nowhere, "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input-dir", huge)...)
	if r.code != exitFailure || !strings.Contains(r.stderr, "--input-dir "+huge+": b is 2.0 MiB; the limit is 1.0 MiB per task") ||
		!strings.Contains(r.stderr, "hint: pass less input per task (split the file), or have the task fetch its data") {
		t.Errorf("an oversized file of --input-dir: %+v", r)
	}
	r = runCLI(t, append(nowhere, "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", huge)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--inputs "+huge+" is a directory") || !strings.Contains(r.stderr, "hint: for one task per file in it, use --input-dir "+huge) {
		t.Errorf("a directory as --inputs: %+v", r)
	}
}

// Grants and modules the node refuses, through the CLI: an empty
// --allow-host or --secret was a Cedar error ("resource Grant has no
// ID"), a host with a port was accepted and the job failed 'blocked', and
// a .wat file got "bad magic" with a hint to build with GOOS=wasip1.
func TestSubmitRefusesEmptyGrantsBadHostsAndWAT(t *testing.T) {
	c := startNode(t)
	mod := testwasm.Path(t, "reverse")
	wat := filepath.Join(t.TempDir(), "hello.wat")
	os.WriteFile(wat, []byte(";; hello\n(module\n  (func (export \"_start\")))\n"), 0o600)
	junk := filepath.Join(t.TempDir(), "junk.wasm")
	os.WriteFile(junk, []byte("hello, not a module\n"), 0o600)
	empty := filepath.Join(t.TempDir(), "zero.wasm")
	os.WriteFile(empty, nil, 0o600)
	for _, tc := range []struct {
		args       []string
		want, hint string
	}{
		{[]string{"--wasm", mod, "--allow-host", ""}, "error: empty host name in --allow-host", "hint: give a host such as example.com"},
		{[]string{"--wasm", mod, "--secret", ""}, "error: empty secret name in --secret", "palyra secret list"},
		{[]string{"--wasm", mod, "--allow-host", "127.0.0.1:18089"}, `"127.0.0.1:18089" has a port`, "hint: give --allow-host 127.0.0.1;"},
		{[]string{"--wasm", wat}, "error: --wasm " + wat + ": the module is WebAssembly text (.wat)", "hint: convert it with 'wat2wasm FILE' (from wabt)"},
		{[]string{"--wasm", wat, "--wait"}, "error: --wasm " + wat + ": the module is WebAssembly text (.wat)", "hint: convert it with 'wat2wasm FILE' (from wabt)"},
		{[]string{"--wasm", junk}, "error: --wasm " + junk + ": ", "hint: "},
		{[]string{"--wasm", junk, "--wait"}, "error: --wasm " + junk + ": ", "hint: "},
		{[]string{"--wasm", empty, "--wait"}, "error: --wasm " + empty + " is empty (0 bytes)", "hint: pass the .wasm file your build wrote"},
	} {
		r := c.cli(append([]string{"job", "submit", "--input", "x"}, tc.args...)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, tc.hint) || strings.Contains(r.stderr, "has no ID") {
			t.Errorf("%v: %+v; want exit 1, %q and %q", tc.args, r, tc.want, tc.hint)
		}
	}
	if r := c.cli("job", "list", "--json"); !strings.Contains(r.stdout, `"jobs": []`) {
		t.Fatalf("refused submissions created jobs: %s", r.stdout)
	}
}
