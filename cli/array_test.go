package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node/api"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func TestReadInputLines(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a", []string{"a"}},
		{"a\nb\n", []string{"a", "b"}},             // a final newline starts no task
		{"a\r\nb\r\n", []string{"a", "b"}},         // CRLF files
		{"a\n\nb", []string{"a", "", "b"}},         // an empty line is an empty input
		{"\n", []string{""}},                       // one empty line
		{" x \n\ty", []string{" x ", "\ty"}},       // nothing else is trimmed
		{"a\nb\n\n", []string{"a", "b", ""}},       // only one final newline is dropped
		{"caf\xc3\xa9\n", []string{"caf\xc3\xa9"}}, // bytes pass through
	}
	for _, c := range cases {
		got, err := readInputLines(strings.NewReader(c.in))
		if err != nil {
			t.Fatal(err)
		}
		var gs []string
		for _, g := range got {
			gs = append(gs, string(g))
		}
		if !slices.Equal(gs, c.want) {
			t.Errorf("readInputLines(%q) = %q, want %q", c.in, gs, c.want)
		}
	}
}

func TestReadInputDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("b.txt", "bee")
	write("a.txt", "ay")
	write("10.txt", "ten")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("sub/inner", "skipped")
	if err := os.Symlink("a.txt", filepath.Join(dir, "c-link")); err != nil {
		t.Fatal(err)
	}
	in, names, skipped, err := readInputDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if skipped.dirs != 1 || skipped.special != 0 {
		t.Fatalf("skipped %+v, want the one subdirectory", skipped)
	}
	if want := []string{"10.txt", "a.txt", "b.txt", "c-link"}; !slices.Equal(names, want) {
		t.Fatalf("names %v, want %v (name order, regular files and links to them only)", names, want)
	}
	var got []string
	for _, b := range in {
		got = append(got, string(b))
	}
	if want := []string{"ten", "ay", "bee", "ay"}; !slices.Equal(got, want) {
		t.Fatalf("inputs %q, want %q", got, want)
	}
}

func TestParseDays(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "90m": 90 * time.Minute, "7d": 7 * 24 * time.Hour,
		"1d12h": 36 * time.Hour, "36h": 36 * time.Hour, "1.5d": 36 * time.Hour, "0.5d6h": 18 * time.Hour, ".25d": 6 * time.Hour, "2.d": 48 * time.Hour} {
		if got, err := parseDays(in); err != nil || got != want {
			t.Errorf("parseDays(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "7days", "-1h", "xd", "1d-1h", ".d", "1.5h2d", "-1.5d", "1..5d", "1.5.d"} {
		if _, err := parseDays(bad); err == nil {
			t.Errorf("parseDays(%q) accepted", bad)
		}
	}
	if _, err := parseDays("-2h"); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("parseDays(-2h): %v, want it called negative", err)
	}
}

// A job array from --inputs runs every line; --wait prints the outputs in
// task order, one per line, and exits 0; --json gives array and tasks;
// job get and job list --array show it.
func TestArrayInputsWait(t *testing.T) {
	c := startNode(t)
	dir := t.TempDir()
	lines := filepath.Join(dir, "words.txt")
	os.WriteFile(lines, []byte("abc\nhello\r\n\nxyz\n"), 0o600)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", lines, "--wait")
	if r.code != 0 || r.stdout != "cba\nolleh\n\nzyx\n" {
		t.Fatalf("submit --inputs --wait: %+v", r)
	}
	if !strings.Contains(r.stderr, "4/4 ended (4 completed)") {
		t.Fatalf("no progress line on stderr: %q", r.stderr)
	}
	// The empty line 3 is a task, and noted as one.
	note, rest, _ := strings.Cut(r.stderr, "\n")
	if !strings.Contains(note, "1 empty line(s) of "+lines+" (line 3)") {
		t.Fatalf("stderr does not start with the empty-line note: %q", r.stderr)
	}
	// The array's id comes next, as a terminal's progress bar lacks it.
	if first, _, _ := strings.Cut(rest, "\n"); !regexp.MustCompile(`^array j-[0-9a-f]{16}: 4 tasks submitted; .*'palyra job watch j-[0-9a-f]{16}'`).MatchString(first) {
		t.Fatalf("stderr does not start with the array's id: %q", r.stderr)
	}
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", lines, "--wait", "--json")
	var doc struct {
		Array arrayJSON `json:"array"`
		Tasks []jobJSON `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 {
		t.Fatalf("--wait --json: %v %+v", err, r)
	}
	if doc.Array.Size != 4 || !doc.Array.Done || doc.Array.Counts["completed"] != 4 || len(doc.Tasks) != 4 {
		t.Fatalf("--json document: %+v", doc)
	}
	for i, task := range doc.Tasks {
		if task.ArrayID != doc.Array.ID || task.ArrayIndex == nil || *task.ArrayIndex != uint32(i) {
			t.Fatalf("task %d: %+v", i, task)
		}
	}
	if doc.Tasks[1].Output != "olleh" || doc.Tasks[2].Output != "" {
		t.Fatalf("task outputs: %q %q", doc.Tasks[1].Output, doc.Tasks[2].Output)
	}
	id := doc.Array.ID
	r = c.cli("job", "get", id)
	if r.code != 0 || !strings.Contains(r.stdout, "4: 4 completed") || !strings.Contains(r.stdout, "palyra job list --array "+id) {
		t.Fatalf("job get on an array: %+v", r)
	}
	r = c.cli("job", "list", "--array", id, "--limit", "3")
	if r.code != 0 || !strings.Contains(r.stdout, id+".0") || strings.Contains(r.stdout, id+".3") ||
		!strings.Contains(r.stderr, "more jobs: palyra job list --array "+id+" --limit 3 --after "+id+".2") {
		t.Fatalf("job list --array: %+v", r)
	}
	// job watch on an ended array prints its outputs as --wait does.
	if r := c.cli("job", "watch", id); r.code != 0 || r.stdout != "cba\nolleh\n\nzyx\n" {
		t.Fatalf("job watch on an array: %+v", r)
	}
}

// --input-dir runs one task per file; --output-dir writes one file per
// task; a failing task is reported with its index and makes the command
// fail.
func TestArrayInputDirOutputDirAndFailure(t *testing.T) {
	c := startNode(t)
	in := t.TempDir()
	for name, data := range map[string]string{"a": "1ms", "b": "bogus", "c": "2ms"} {
		os.WriteFile(filepath.Join(in, name), []byte(data), 0o600)
	}
	out := filepath.Join(t.TempDir(), "results")
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--input-dir", in, "--wait", "--output-dir", out)
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("want exit 1 and nothing on stdout: %+v", r)
	}
	if !strings.Contains(r.stderr, "task 1 (") || !strings.Contains(r.stderr, ", file b) failed:") ||
		!strings.Contains(r.stderr, "1 of 3 tasks did not complete") {
		t.Fatalf("failure report: %q", r.stderr)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if read("000000.out") != "slept 1ms" || read("000002.out") != "slept 2ms" || !strings.Contains(read("000001.err"), "bad duration") {
		t.Fatalf("output files wrong")
	}
	if _, err := os.Stat(filepath.Join(out, "000000.err")); !os.IsNotExist(err) {
		t.Fatalf("an .err file for a task with no stderr: %v", err)
	}
	// inputs.tsv traces each task to its file.
	if got := read("inputs.tsv"); got != "000000\ta\n000001\tb\n000002\tc\n" {
		t.Fatalf("inputs.tsv: %q", got)
	}
	// The failed task has a .failed saying why, and no .out (an empty one
	// read as an empty result).
	if _, err := os.Stat(filepath.Join(out, "000001.out")); !os.IsNotExist(err) || !strings.Contains(read("000001.failed"), "failed") {
		t.Fatalf("failed task's files: .out %v", err)
	}
	// Under --json, stdout is one JSON object and stderr the error object
	// alone (progress lines and each failed task's line came first, so
	// stderr did not parse).
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--input-dir", in, "--wait", "--json")
	var outJSON, errJSON map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &outJSON); r.code != 1 || err != nil {
		t.Fatalf("--wait --json: exit %d, stdout does not parse (%v): %q", r.code, err, r.stdout)
	}
	if err := json.Unmarshal([]byte(r.stderr), &errJSON); err != nil || errJSON["error"] == nil {
		t.Fatalf("--wait --json: stderr is not one error object (%v): %q", err, r.stderr)
	}
	// A file name with a tab or a newline is quoted in inputs.tsv.
	odd := t.TempDir()
	os.WriteFile(filepath.Join(odd, "new\nline"), []byte("1ms"), 0o600)
	os.WriteFile(filepath.Join(odd, "tab\tname"), []byte("1ms"), 0o600)
	oddOut := filepath.Join(t.TempDir(), "odd")
	if r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--input-dir", odd, "--wait", "--output-dir", oddOut); r.code != 0 {
		t.Fatalf("odd names: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(oddOut, "inputs.tsv")); string(b) != "000000\t\"new\\nline\"\n000001\t\"tab\\tname\"\n" {
		t.Fatalf("inputs.tsv of odd names: %q", b)
	}
	// A directory that holds anything is refused before anything is
	// submitted: another run's files would mix with this one's.
	before := strings.Count(c.cli("job", "list").stdout, "\n")
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input-dir", in, "--wait", "--output-dir", out)
	if r.code != 2 || !strings.Contains(r.stderr, "is not empty") {
		t.Fatalf("a non-empty --output-dir: %+v", r)
	}
	if after := strings.Count(c.cli("job", "list").stdout, "\n"); after != before {
		t.Fatalf("a refused --output-dir submitted jobs: %d lines, %d before", after, before)
	}
}

func TestArrayUsageErrors(t *testing.T) {
	c := startNode(t)
	dir := t.TempDir()
	lines := filepath.Join(dir, "in.txt")
	os.WriteFile(lines, []byte("a\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	emptyDir := t.TempDir()
	mod := testwasm.Path(t, "reverse")
	for _, tc := range []struct {
		args  []string
		code  int
		inErr string
	}{
		{[]string{"--inputs", lines, "--input", "x"}, 2, "drop --input"},
		{[]string{"--inputs", lines, "--input-dir", dir}, 2, "either --inputs or --input-dir"},
		{[]string{"--inputs", empty}, 2, "is empty"},
		{[]string{"--input-dir", emptyDir}, 2, "holds no regular files"},
		{[]string{"--inputs", lines, "--output-dir", dir}, 2, "--output-dir"},
		{[]string{"--input", "x", "--wait", "--output-dir", dir}, 2, "--output-dir"},
		// Missing like empty: a wrong argument (a missing --input-dir
		// was exit 1, an empty one exit 2).
		// A path that cannot be read exits 1, as a --wasm that cannot.
		{[]string{"--inputs", filepath.Join(dir, "missing")}, 1, "cannot read --inputs"},
		{[]string{"--input-dir", filepath.Join(dir, "missing")}, 1, "does not exist"},
		{[]string{"--input-dir", lines}, 2, "is not a directory"},
	} {
		r := c.cli(append([]string{"job", "submit", "--wasm", mod}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.inErr) {
			t.Errorf("%v: want exit %d and %q, got %+v", tc.args, tc.code, tc.inErr, r)
		}
	}
}

// Cancel an array; list newest first with a next-page hint; prune, after
// which job get says the job may have been pruned; retention shown and set.
func TestCancelArrayPruneRetention(t *testing.T) {
	c := startNode(t)
	lines := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(lines, []byte("5m\n5m\n5m\n"), 0o600)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--inputs", lines, "--timeout", "10m")
	arr := strings.TrimSpace(r.stdout)
	if r.code != 0 || arr == "" {
		t.Fatalf("submit: %+v", r)
	}
	// While tasks run, get says what "running" counts (prefetched tasks
	// wait on their worker in that phase).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r := c.cli("job", "get", arr)
		if r.code == 0 && strings.Contains(r.stdout, " running") {
			if !strings.Contains(r.stdout, "(running: placed on a worker, running or waiting there for a slot)") {
				t.Fatalf("get of a running array: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no task of %s running after 20s: %+v", arr, r)
		}
	}
	if r := c.cli("job", "cancel", arr); r.code != 0 || r.stdout != arr+" cancelled: 3 aborted\n" {
		t.Fatalf("cancel array: %+v", r)
	}
	var ids []string
	for _, in := range []string{"one", "two"} {
		r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", in)
		ids = append(ids, strings.TrimSpace(r.stdout))
		c.waitTerminal(ids[len(ids)-1])
	}
	r = c.cli("job", "list", "--limit", "1")
	if r.code != 0 || !strings.Contains(r.stdout, ids[1]) || !strings.Contains(r.stderr, "more jobs: palyra job list --limit 1 --after "+ids[1]) {
		t.Fatalf("newest first with a hint: %+v", r)
	}
	r = c.cli("job", "list", "--json")
	var list struct{ Jobs []jobJSON }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Jobs) != 5 || list.Jobs[0].ID != ids[1] {
		t.Fatalf("list --json: %v %+v", err, r)
	}
	for _, j := range list.Jobs {
		if j.Output != "" || (j.ArrayID == "" && j.OutputSize == 0) {
			t.Fatalf("a list entry carries output or lost its size: %+v", j)
		}
	}
	if r := c.cli("job", "retention"); r.code != 0 || r.stdout != "ended jobs are kept for 24h\n" {
		t.Fatalf("retention: %+v", r)
	}
	// A dry run counts what would go and removes nothing.
	if r := c.cli("job", "prune", "--older-than", "0", "--dry-run"); r.code != 0 || !strings.HasPrefix(r.stdout, "would prune 5 jobs that ended before ") || !strings.Contains(r.stdout, "nothing removed") {
		t.Fatalf("prune --dry-run: %+v", r)
	}
	if r := c.cli("job", "prune", "--older-than", "0", "--dry-run", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"would_prune": 5`) {
		t.Fatalf("prune --dry-run --json: %+v", r)
	}
	if r := c.cli("job", "get", ids[0]); r.code != 0 {
		t.Fatalf("a dry run removed a job: %+v", r)
	}
	if r := c.cli("job", "prune", "--older-than", "0"); r.code != 0 || r.stdout == "" || !strings.HasPrefix(r.stdout, "pruned 5 jobs that ended before ") ||
		!strings.Contains(r.stdout, "their blobs (inputs and outputs over 4 KiB, modules no kept job uses) are deleted on every node within a few minutes") {
		t.Fatalf("prune: %+v", r)
	}
	r = c.cli("job", "get", ids[0])
	if r.code != 1 || !strings.Contains(r.stderr, "have been pruned (by the retention, now 24h, by the cap on ended jobs held, or by 'palyra job prune')") || !strings.Contains(r.stderr, "hint: ") {
		t.Fatalf("get after prune: %+v", r)
	}
	if r := c.cli("job", "retention", "7d"); r.code != 0 || r.stdout != "ended jobs are now kept for 7d\n" {
		t.Fatalf("set retention: %+v", r)
	}
	r = c.cli("status", "--json")
	var st map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st["retention_ms"] != float64(7*86_400_000) || st["pruned_before"] == "" {
		t.Fatalf("status --json: %v %v", err, st)
	}
	if r := c.cli("status"); !strings.Contains(r.stdout, "ended jobs kept 7d; jobs that ended before") {
		t.Fatalf("status: %+v", r)
	}
	// Out of range is a usage error, said before anything is sent, as a 0 is.
	if r := c.cli("job", "retention", "1s"); r.code != exitUsage || !strings.Contains(r.stderr, "retention 1s is out of range: use between 1m and 3650d") {
		t.Fatalf("1s retention: %+v", r)
	}
}

// A plain device may not prune or set the retention (job.prune is an
// operator's), may read it, and lists only its own jobs.
func TestDeviceCannotPruneAndListsItsOwn(t *testing.T) {
	c := startNode(t)
	cfg := filepath.Join(t.TempDir(), "dev")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr(), "--name", "ci"); r.code != 0 {
		t.Fatalf("pair: %+v", r)
	}
	if r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "operator's", "--wait"); r.code != 0 {
		t.Fatalf("operator submit: %+v", r)
	}
	r := device(t, cfg, "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", "-", "--wait")
	if r.code != 2 || !strings.Contains(r.stderr, "is empty") {
		t.Fatalf("device submit with empty stdin: %+v", r)
	}
	r = device(t, cfg, "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "mine", "--wait")
	if r.code != 0 || r.stdout != "enim" {
		t.Fatalf("device submit: %+v", r)
	}
	r = device(t, cfg, "job", "list", "--json")
	var list struct{ Jobs []jobJSON }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Jobs) != 1 || !strings.HasPrefix(list.Jobs[0].Submitter, "device:") {
		t.Fatalf("device list: %v %+v", err, r)
	}
	for _, args := range [][]string{{"job", "prune", "--older-than", "0"}, {"job", "retention", "7d"}} {
		r := device(t, cfg, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "job.prune") || !strings.Contains(r.stderr, "hint: ") {
			t.Fatalf("%v by a device: %+v", args, r)
		}
	}
	if r := device(t, cfg, "job", "retention"); r.code != 0 || !strings.Contains(r.stdout, "24h") {
		t.Fatalf("device reads the retention: %+v", r)
	}
}

// --wait on an array gives up, as on a job, when no node can run any of
// its tasks, and stops at --wait-timeout; the array goes on either way.
func TestArrayWaitGivesUpAndTimesOut(t *testing.T) {
	c := startNode(t)
	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, []byte("3s\n3s\n"), 0o600)
	start := time.Now()
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", in, "--constraint", "zone=nowhere", "--wait")
	if r.code != 1 || !strings.Contains(r.stderr, "no task can start: no eligible node") || !strings.Contains(r.stderr, "palyra job cancel") {
		t.Fatalf("an array no node can run: %+v", r)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("gave up only after %s", time.Since(start))
	}
	// 'job watch' follows it for as long as it takes (it does not give up):
	// still following after the give-up time, it ends when the array does.
	stuck := regexp.MustCompile(`array (j-[0-9a-f]+)`).FindStringSubmatch(r.stderr)
	if stuck == nil {
		t.Fatalf("no array id in %q", r.stderr)
	}
	done := make(chan result, 1)
	go func() { done <- c.cli("job", "watch", stuck[1]) }()
	select {
	case w := <-done:
		t.Fatalf("job watch gave up on an array no node can run: %+v", w)
	case <-time.After(giveUpAfter + 2*time.Second):
	}
	if r := c.cli("job", "cancel", stuck[1]); r.code != 0 {
		t.Fatalf("cancel: %+v", r)
	}
	if w := <-done; w.code != 1 || !strings.Contains(w.stderr, "did not complete") {
		t.Fatalf("job watch of the cancelled array: %+v", w)
	}
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--inputs", in, "--wait", "--wait-timeout", "1s")
	if r.code != 1 || !strings.Contains(r.stderr, "gave up waiting after 1s") || !strings.Contains(r.stderr, "The array goes on") {
		t.Fatalf("--wait-timeout on an array: %+v", r)
	}
}

// Commands on one job name an array for what it is (they said it "may
// have been pruned").
func TestOneJobCommandsOnAnArray(t *testing.T) {
	c := startNode(t)
	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, []byte("a\nb\n"), 0o600)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", in)
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	for _, args := range [][]string{{"job", "logs", id}, {"job", "approve", id, "--reason", "x"}, {"job", "artifact", id, "a.txt", "-o", filepath.Join(t.TempDir(), "x")}} {
		r := c.cli(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "is a job array of 2 tasks") || strings.Contains(r.stderr, "pruned") {
			t.Errorf("%v: %+v", args, r)
		}
	}
}

// A count of days too large for a duration is out of range, not negative,
// and a retention says the node's bounds.
func TestParseDaysOverflow(t *testing.T) {
	for _, s := range []string{"106752d", "1000000d", "99999999999999999999d", "106751d24h", "3000000h", "106751d23h48m", "1000000.5d"} {
		_, err := parseDays(s)
		var re *durationRangeError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "out of range") || !strings.Contains(err.Error(), "106751d") {
			t.Errorf("parseDays(%q): %v; want out of range, at most 106751d", s, err)
		}
	}
	if d, err := parseDays("106751d"); err != nil || d <= 0 {
		t.Errorf("parseDays(106751d) = %v, %v", d, err)
	}
	if minRetention != api.MinRetention || maxRetention != api.MaxRetention {
		t.Errorf("the CLI's retention bounds %v..%v differ from the node's %v..%v", minRetention, maxRetention, api.MinRetention, api.MaxRetention)
	}
	r := runCLI(t, "job", "prune", "--older-than", "106752d")
	if r.code != exitUsage || !strings.Contains(r.stderr, "out of range") || strings.Contains(r.stderr, "negative") {
		t.Errorf("job prune --older-than 106752d: %+v; want a usage error saying out of range", r)
	}
	r = runCLI(t, "job", "retention", "1000000d")
	if r.code != exitUsage || !strings.Contains(r.stderr, "retention 1000000d is out of range: use between 1m and 3650d") {
		t.Errorf("job retention 1000000d: %+v; want out of range with the bounds", r)
	}
}

// An --output-dir that cannot be written is refused before the array is
// submitted; a failure after the array was accepted names it and where
// its results are.
func TestArrayOutputDirUnwritable(t *testing.T) {
	c := startNode(t)
	dir := t.TempDir()
	lines := filepath.Join(dir, "in.txt")
	os.WriteFile(lines, []byte("a\nb\n"), 0o600)
	// A directory that cannot be created, though nothing is in the way
	// (as /sys/nope: not there, and mkdir refused).
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o500)
	bad := filepath.Join(ro, "out")
	if os.Geteuid() == 0 { // root writes anywhere, but not in sysfs
		bad = "/sys/palyra-test-out"
		if err := os.Mkdir(bad, 0o700); err == nil || errors.Is(err, os.ErrNotExist) {
			os.Remove(bad)
			t.Skip("running as root without a sysfs that refuses mkdir")
		}
	}
	mod := testwasm.Path(t, "reverse")
	r := c.cli("job", "submit", "--wasm", mod, "--inputs", lines, "--wait", "--output-dir", bad)
	if r.code != 1 || !strings.Contains(r.stderr, "cannot write to --output-dir "+bad) || !strings.Contains(r.stderr, "nothing was submitted") {
		t.Fatalf("an unwritable --output-dir: %+v", r)
	}
	if l := c.cli("job", "list"); strings.Contains(l.stdout, "j-") {
		t.Fatalf("an unwritable --output-dir submitted jobs:\n%s", l.stdout)
	}
	r = c.cli("job", "submit", "--wasm", mod, "--inputs", lines)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "j-") {
		t.Fatalf("submit: %+v", r)
	}
	r = c.cli("job", "watch", id, "--output-dir", bad)
	if r.code != 1 || !strings.Contains(r.stderr, "array "+id+": cannot write to --output-dir") ||
		!strings.Contains(r.stderr, "palyra job get "+id) || !strings.Contains(r.stderr, "palyra job watch "+id) {
		t.Fatalf("watch into an unwritable --output-dir: %+v", r)
	}
}

// A failed task's report says which input line it ran, and its stderr's
// last line, which the failure line quotes, is not printed twice.
func TestArrayFailureNamesItsInputOnce(t *testing.T) {
	c := startNode(t)
	lines := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(lines, []byte("1ms\nbogus\n"), 0o600)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--inputs", lines, "--wait")
	if r.code != 1 || r.stdout != "slept 1ms\n\n" {
		t.Fatalf("want exit 1 and the outputs: %+v", r)
	}
	if !regexp.MustCompile(`task 1 \(j-[0-9a-f]{16}\.1, line 2 of ` + regexp.QuoteMeta(lines) + `\) failed: exited with code 2: bad duration "bogus"`).MatchString(r.stderr) {
		t.Fatalf("the failure line does not name the task's input line: %q", r.stderr)
	}
	if n := strings.Count(r.stderr, `bad duration "bogus"`); n != 1 {
		t.Fatalf("the task's stderr appears %d times, want once: %q", n, r.stderr)
	}
}

func TestStderrBeforeQuote(t *testing.T) {
	for _, tc := range []struct{ stderr, msg, want string }{
		{"refuse 7\n", "exited with code 2: refuse 7", ""},
		{"warming up\nrefuse 7\n", "exited with code 2: refuse 7", "warming up\n"},
		{"a\r\nrefuse 7  \n\n", "exited with code 2: refuse 7", "a\r\n"},
		{"other\n", "exited with code 2: refuse 7", "other\n"}, // not quoted: kept
		{"refuse 7\n", "timed out after 1s", "refuse 7\n"},
		{"", "exited with code 2 (stderr is empty)", ""},
	} {
		if got := string(stderrBeforeQuote([]byte(tc.stderr), tc.msg)); got != tc.want {
			t.Errorf("stderrBeforeQuote(%q, %q) = %q, want %q", tc.stderr, tc.msg, got, tc.want)
		}
	}
	src := taskInputs{file: "in.txt"}
	if got := src.of(6); got != "line 7 of in.txt" {
		t.Errorf("task 6 of --inputs: %q", got)
	}
	if got := (taskInputs{file: "-"}).of(0); got != "line 1 of stdin" {
		t.Errorf("task 0 of --inputs -: %q", got)
	}
	if got := (taskInputs{names: []string{"a", "b"}}).of(1); got != "file b" {
		t.Errorf("task 1 of --input-dir: %q", got)
	}
	if got := (taskInputs{}).of(1); got != "" {
		t.Errorf("unknown inputs: %q", got)
	}
}

// A task's stderr past maxTaskStderrLines lines is cut to its tail under a
// line saying so and where the rest is; a shorter one is kept whole.
func TestStderrTail(t *testing.T) {
	short := []byte("a\nb\n")
	if got := stderrTail(short, "j-1.0"); string(got) != string(short) {
		t.Fatalf("short stderr changed: %q", got)
	}
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	got := string(stderrTail([]byte(b.String()), "j-1.3"))
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != maxTaskStderrLines+1 || lines[0] != "[j-1.3: stderr's last 20 of 100 lines; all of it: palyra job logs j-1.3, or --output-dir]" ||
		lines[1] != "line 81" || lines[len(lines)-1] != "line 100" {
		t.Fatalf("tail of 100 lines: %q", got)
	}
}

// An empty job list says so on stderr (a header alone read as a failure),
// and which kind of empty it is.
func TestEmptyJobListSaysSo(t *testing.T) {
	c := startNode(t)
	if r := c.cli("job", "list"); r.code != 0 || r.stderr != "no jobs\n" || !strings.HasPrefix(r.stdout, "ID") {
		t.Fatalf("empty list: %+v", r)
	}
	if r := c.cli("job", "list", "--phase", "failed"); r.code != 0 || r.stderr != "no jobs match\n" {
		t.Fatalf("empty filtered list: %+v", r)
	}
	if r := c.cli("job", "list", "--json"); r.code != 0 || r.stderr != "" {
		t.Fatalf("--json says nothing on stderr: %+v", r)
	}
	for args, want := range map[string]string{"secret list": "no secrets", "hook list": "no hooks bound", "skill trust list": "no trusted publishers"} {
		if r := c.cli(strings.Fields(args)...); r.code != 0 || !strings.HasPrefix(r.stderr, want+" (") {
			t.Errorf("%s with nothing to list: %+v", args, r)
		}
	}
}

// Under --json, notes and warnings reach stderr as JSON objects (they were
// left out, or broke the error object's parse), and nothing else does.
func TestNotesUnderJSONAreObjects(t *testing.T) {
	c := startNode(t)
	lines := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(lines, []byte("1ms\n\n2ms\n"), 0o600)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "sleep"), "--inputs", lines, "--json")
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	dec := json.NewDecoder(strings.NewReader(r.stderr))
	var objs []map[string]string
	for {
		var o map[string]string
		if err := dec.Decode(&o); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("stderr is not JSON objects (%v): %q", err, r.stderr)
		}
		objs = append(objs, o)
	}
	if len(objs) != 1 || !strings.Contains(objs[0]["note"], "1 empty line(s)") {
		t.Fatalf("stderr objects %v, want one note of the empty line", objs)
	}
}

// A large array that did not complete names the first tasks of each way
// they ended and counts the rest (a trial: a cancelled array of 400,000
// tasks wrote 399,992 stderr lines).
func TestTaskFailuresAreCountedPastTheFirst(t *testing.T) {
	f := taskFailures{}
	shown := 0
	for i := range 100 {
		j := &palyrav1.Job{Phase: palyrav1.JobPhase_JOB_PHASE_ABORTED, Error: &palyrav1.Error{Code: "aborted"}}
		if i%10 == 0 {
			j = &palyrav1.Job{Phase: palyrav1.JobPhase_JOB_PHASE_FAILED, Error: &palyrav1.Error{Code: "trap"}}
		}
		if f.show(j) {
			shown++
		}
	}
	if shown != maxTaskFailureLines+10 {
		t.Errorf("%d lines shown, want %d aborted and all 10 failed", shown, maxTaskFailureLines)
	}
	var b bytes.Buffer
	f.summary(&b, "j-1")
	if got, want := b.String(), "… and 70 more tasks aborted (aborted), not named here; all of them: palyra job list --array j-1 --phase aborted\n"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}
