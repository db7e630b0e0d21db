package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
)

// On a node that has lost its quorum, every read command that can read
// the node's own replica does so when asked, wherever it is asked: the
// global --stale before the command, PALYRA_STALE, or --stale after it
// (kv's commands have a --stale of their own, which used to hide the
// global one; audit list could not read stale at all). A read that needs
// a quorum still fails and names --stale; a snapshot, which cannot be
// stale, says so instead of suggesting --stale.
func TestReadsHonourStaleWithoutAQuorum(t *testing.T) {
	c := startNode(t)
	second, _ := c.joinNode()
	third, _ := c.joinNode()
	waitCluster(t, []*node.Node{c.node, second, third}, 3)
	if r := c.cli("kv", "put", "restore/marker", "here"); r.code != 0 {
		t.Fatalf("kv put: %+v", r)
	}
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "abc")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "j-") {
		t.Fatalf("submit: %+v", r)
	}
	c.waitTerminal(id)

	second.Close() // one voter of three left: no quorum
	third.Close()
	// The leader may still serve a read within its lease, and learns the
	// quorum is gone only then (a read right after the Close passed once in
	// a fresh clone): the read must fail, and name --stale, once it has.
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := c.cli("kv", "get", "restore/marker")
		if r.code != 0 {
			if !strings.Contains(r.stderr, "add --stale") {
				t.Fatalf("a linearizable read without a quorum failed without naming --stale: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a linearizable read without a quorum still succeeds 20s after the quorum went: %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	export := filepath.Join(t.TempDir(), "journal.jsonl")
	reads := []struct {
		args []string
		want string // on stdout
	}{
		{[]string{"kv", "get", "restore/marker"}, "here"},
		{[]string{"kv", "list"}, "restore/marker"},
		{[]string{"audit", "list"}, "pairing.create"},
		{[]string{"audit", "list", "--oldest-first"}, "pairing.create"},
		{[]string{"audit", "export", "-o", export}, ""},
		{[]string{"job", "get", id}, id},
		{[]string{"job", "list"}, id},
		{[]string{"job", "list", "--arrays"}, ""},
		{[]string{"device", "list"}, "local operator"},
		{[]string{"ca", "status"}, c.node.ID()},
		{[]string{"policy", "get"}, ""},
		{[]string{"pair", "list"}, ""},
	}
	check := func(how string, args []string, want string) {
		t.Helper()
		if r := c.cli(args...); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("%s with %s: %+v", strings.Join(args, " "), how, r)
		}
	}
	for _, rd := range reads {
		check("--stale before it", append([]string{"--stale"}, rd.args...), rd.want)
		check("--stale after it", append(rd.args, "--stale"), rd.want)
	}
	t.Setenv("PALYRA_STALE", "1")
	for _, rd := range reads {
		check("PALYRA_STALE=1", rd.args, rd.want)
	}

	r = c.cli("snapshot", "save", filepath.Join(t.TempDir(), "s.palyra"))
	if r.code == 0 || strings.Contains(r.stderr, "add --stale") || !strings.Contains(r.stderr, "a snapshot needs a quorum") ||
		!strings.Contains(r.stderr, "palyra node recover") {
		t.Fatalf("snapshot save without a quorum should say it needs one, not suggest --stale: %+v", r)
	}
	if r := c.cli("audit", "verify"); r.code == 0 || strings.Contains(r.stderr, "--stale") {
		t.Fatalf("audit verify, which cannot read stale, should not suggest --stale: %+v", r)
	}
}
