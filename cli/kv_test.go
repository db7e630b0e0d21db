package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// An operator seeds, reads, lists and deletes the key-value store jobs use,
// and sees what a job wrote; writes are in the audit journal; a device
// that is not an operator is refused (kv.read and kv.write are admin
// actions under the default policy).
func TestKVCommands(t *testing.T) {
	c := startNode(t)
	if r := c.cli("kv", "put", "app/counter", "41"); r.code != 0 || !strings.Contains(r.stdout, "app/counter set (2 B)") {
		t.Fatalf("kv put: %+v", r)
	}
	// A job granted the prefix reads the seeded value and writes it back.
	if r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "kv"), "--input", "app/counter", "--kv-prefix", "app/", "--wait"); r.code != 0 || strings.TrimSpace(r.stdout) != "42" {
		t.Fatalf("the job did not read the seeded value: %+v", r)
	}
	if r := c.cli("kv", "get", "app/counter"); r.code != 0 || r.stdout != "42" {
		t.Fatalf("kv get after the job: %+v", r)
	}
	for _, k := range []string{"app/k1", "app/k2", "app/k3", "other/x"} {
		if r := c.cli("kv", "put", k, "v-"+k); r.code != 0 {
			t.Fatalf("kv put %s: %+v", k, r)
		}
	}
	bin := filepath.Join(t.TempDir(), "bin")
	os.WriteFile(bin, []byte{0xff, 0x00, 0x01}, 0o600)
	if r := c.cli("kv", "put", "app/z-bin", "--from-file", bin); r.code != 0 {
		t.Fatalf("kv put --from-file: %+v", r)
	}
	// Pages of two, in key order, with the cursor to go on; --all for all.
	r := c.cli("kv", "list", "app/", "--limit", "2")
	if r.code != 0 || !strings.Contains(r.stdout, "app/counter") || !strings.Contains(r.stdout, "app/k1") || strings.Contains(r.stdout, "app/k2") ||
		!strings.Contains(r.stderr, `--after "app/k1" --limit 2 (or --all)`) {
		t.Fatalf("kv list --limit 2: %+v, want the next page's command to keep --limit", r)
	}
	if r := c.cli("kv", "list", "app/", "--limit", "2", "--all"); r.code != exitUsage || !strings.Contains(r.stderr, "give one of them") {
		t.Fatalf("kv list --limit --all: %+v", r)
	}
	r = c.cli("kv", "list", "app/", "--after", "app/k1", "--keys-only", "--all")
	if r.code != 0 || r.stdout != "app/k2\napp/k3\napp/z-bin\n" || r.stderr != "" {
		t.Fatalf("kv list --after --all: %+v", r)
	}
	r = c.cli("kv", "list", "--json", "--all")
	var list struct {
		Entries []kvEntryJSON
		Next    string
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Entries) != 6 || list.Next != "" ||
		list.Entries[4].Key != "app/z-bin" || list.Entries[4].ValueBase64 != "/wAB" || list.Entries[5].Value != "v-other/x" {
		t.Fatalf("kv list --json: %+v", r)
	}
	if r := c.cli("kv", "list", "nothing/"); r.code != 0 || !strings.Contains(r.stderr, `no keys under "nothing/"`) {
		t.Fatalf("kv list of an empty prefix: %+v", r)
	}
	// Delete: once, then a no-op that says so; a read of it is not found.
	if r := c.cli("kv", "delete", "app/counter"); r.code != 0 || !strings.Contains(r.stdout, "app/counter deleted") {
		t.Fatalf("kv delete: %+v", r)
	}
	if r := c.cli("kv", "rm", "app/counter", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"deleted": false`) {
		t.Fatalf("kv delete of a missing key: %+v", r)
	}
	if r := c.cli("kv", "get", "app/counter"); r.code != 1 || !strings.Contains(r.stderr, `no key "app/counter"`) || !strings.Contains(r.stderr, "kv list") {
		t.Fatalf("kv get of a deleted key: %+v", r)
	}
	// A value starting with - goes after --.
	if r := c.cli("kv", "put", "--", "app/neg", "-1"); r.code != 0 {
		t.Fatalf("kv put -- KEY -1: %+v", r)
	}
	if r := c.cli("kv", "get", "app/neg"); r.stdout != "-1" {
		t.Fatalf("kv get of a negative value: %+v", r)
	}
	if r := c.cli("kv", "list", "app/neg", "--keys-only", "--json"); r.code != 0 || strings.Contains(r.stdout, "size") || !strings.Contains(r.stdout, `"key": "app/neg"`) {
		t.Fatalf("kv list --keys-only --json: %+v", r)
	}
	// Bad input is refused by name.
	big := filepath.Join(t.TempDir(), "big")
	os.WriteFile(big, make([]byte, 65<<10), 0o600)
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "put", "app/big", "--from-file", big}, "over 64 KiB"},
		{[]string{"kv", "put", "app/x"}, "no value"},
		{[]string{"kv", "put", "", "v"}, "key is empty"},
		{[]string{"kv", "get", strings.Repeat("k", 600)}, "at most 512"},
	} {
		if r := c.cli(bad.args...); r.code == 0 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("%v: %+v, want it refused with %q", bad.args[:2], r, bad.want)
		}
	}
	// The operator's writes are in the journal, with who made them.
	r = c.cli("audit", "list", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"kv.put"`) || !strings.Contains(r.stdout, `"kv:app/k1"`) || !strings.Contains(r.stdout, `"kv.delete"`) {
		t.Fatalf("audit list lacks the key-value writes: %+v", r)
	}
	// An empty value reads back as "value": "" in --json (it was left out).
	if r := c.cli("kv", "put", "app/empty", ""); r.code != 0 {
		t.Fatalf("kv put of an empty value: %+v", r)
	}
	if r := c.cli("kv", "get", "app/empty", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"value": ""`) {
		t.Fatalf("kv get --json of an empty value: %+v", r)
	}
	// A paired device that is no operator may not read or write.
	cfg := filepath.Join(t.TempDir(), "laptop")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr()); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	for _, args := range [][]string{{"kv", "get", "app/k1"}, {"kv", "put", "app/k1", "x"}, {"kv", "list"}} {
		if r := device(t, cfg, args...); r.code == 0 || !strings.Contains(r.stderr, "kv.") {
			t.Errorf("a device that is no operator ran %v: %+v", args, r)
		}
	}
}
