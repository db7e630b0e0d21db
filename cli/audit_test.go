package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAuditJournalAcrossNodesAndLeaderLoss: security-relevant changes made
// through different nodes land in one chain that every node verifies with
// the same head, before and after the leader is stopped; an export with
// one altered record is refused naming that record.
func TestAuditJournalAcrossNodesAndLeaderLoss(t *testing.T) {
	c, addrs := threeNodeCluster(t)
	a, b, third := addrs[0], addrs[1], addrs[2]
	secret := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(secret, []byte("v"), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := [][]string{
		{a, "secret", "set", "api-token", "--from-file", secret},
		{b, "skill", "trust", "add", "acme", "ed25519:" + strings.Repeat("A", 43) + "="},
		{third, "pair", "create", "--kind", "device"},
		{b, "secret", "delete", "api-token"},
	}
	for _, s := range steps {
		if r := c.on(s[0], s[1:]...); r.code != 0 {
			t.Fatalf("%v: %q", s[1:], r.stderr)
		}
	}
	r := c.on(third, "audit", "list", "--json")
	var list struct {
		Records []struct {
			Seq     uint64 `json:"seq"`
			Action  string `json:"action"`
			Subject string `json:"subject"`
			Actor   string `json:"actor"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("audit list: %v %q %q", err, r.stdout, r.stderr)
	}
	var actions []string
	for _, rec := range list.Records {
		actions = append(actions, rec.Action+" "+rec.Subject)
	}
	all := strings.Join(actions, "\n")
	for _, want := range []string{"secret.set secret:api-token", "skill.trust publisher:acme", "pairing.create pairing:", "secret.delete secret:api-token", "pairing.consume"} {
		if !strings.Contains(all, want) {
			t.Errorf("journal lacks %q:\n%s", want, all)
		}
	}

	heads := func(nodes ...string) string {
		t.Helper()
		var head string
		for _, n := range nodes {
			r := c.on(n, "audit", "verify", "--json")
			var v struct {
				Ok         bool   `json:"ok"`
				HeadSha256 string `json:"head_sha256"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || !v.Ok {
				t.Fatalf("verify on %s: %d %q %q", n, r.code, r.stdout, r.stderr)
			}
			if head != "" && v.HeadSha256 != head {
				t.Fatalf("node %s has head %s, another %s", n, v.HeadSha256, head)
			}
			head = v.HeadSha256
		}
		return head
	}
	before := heads(a, b, third)

	// The node that created the cluster (the leader) stops once all three
	// are voters; the others elect a leader and keep one chain.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := c.on(b, "nodes", "--json")
		var ns struct {
			Nodes []struct {
				Voter bool `json:"voter"`
			} `json:"nodes"`
		}
		_ = json.Unmarshal([]byte(r.stdout), &ns)
		voters := 0
		for _, n := range ns.Nodes {
			if n.Voter {
				voters++
			}
		}
		if voters == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not three voters: %s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.node.Close()
	deadline = time.Now().Add(30 * time.Second)
	for {
		r := c.on(b, "secret", "set", "after-loss", "--from-file", secret)
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after the leader stopped: %q", r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	after := heads(b, third)
	if after == before {
		t.Fatal("the journal did not grow after the leader loss")
	}

	// Export, alter one record, verify offline.
	exp := filepath.Join(t.TempDir(), "journal.jsonl")
	if r := c.on(third, "audit", "export", "-o", exp); r.code != 0 {
		t.Fatalf("export: %q", r.stderr)
	}
	if r := runCLI(t, "audit", "verify", "--file", exp); r.code != 0 || !strings.Contains(r.stdout, "verified") || !strings.Contains(r.stderr, "checked on its own only") {
		t.Fatalf("verify the export: %q %q; want it verified, with a note that only a trusted head proves it", r.stdout, r.stderr)
	}
	// Against a head the verifier trusts (recorded when the export was
	// made, as 'audit verify' printed it), and a head that is not the
	// export's.
	var live struct {
		HeadSha256 string `json:"head_sha256"`
	}
	first, _, _ := strings.Cut(readFile(t, exp), "\n")
	if json.Unmarshal([]byte(first), &live) != nil || len(live.HeadSha256) < 16 {
		t.Fatalf("export header %q has no head", first)
	}
	if r := runCLI(t, "audit", "verify", "--file", exp, "--head", live.HeadSha256); r.code != 0 || strings.Contains(r.stderr, "on its own") {
		t.Fatalf("verify the export against the cluster's head: %+v", r)
	}
	if r := runCLI(t, "audit", "verify", "--file", exp, "--head", strings.Repeat("0123456789abcdef", 4)); r.code == 0 || !strings.Contains(r.stderr, "not at the head you trust") {
		t.Fatalf("verify the export against another head: %+v; want it refused", r)
	}
	// A file of a header alone that names the trusted head is no proof:
	// the head compared is the chain's, as computed.
	forged := filepath.Join(t.TempDir(), "forged.jsonl")
	var hdr map[string]any
	first2, _, _ := strings.Cut(readFile(t, exp), "\n")
	json.Unmarshal([]byte(first2), &hdr)
	hb, _ := json.Marshal(hdr)
	os.WriteFile(forged, append(hb, '\n'), 0o644)
	if r := runCLI(t, "audit", "verify", "--file", forged, "--head", live.HeadSha256); r.code == 0 {
		t.Fatalf("a header alone naming the trusted head: %+v; want it refused", r)
	}
	if r := runCLI(t, "audit", "verify", "--file", exp, "--head", live.HeadSha256[:12]); r.code != exitUsage {
		t.Fatalf("--head of 12 digits: %+v; want a usage error (48 bits can be ground)", r)
	}
	data, _ := os.ReadFile(exp)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[3]), &rec); err != nil { // the third record (line 0 is the header)
		t.Fatal(err)
	}
	rec["actor"] = "device:d-mallory"
	b2, _ := json.Marshal(rec)
	lines[3] = string(b2)
	if err := os.WriteFile(exp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seq := uint64(rec["seq"].(float64))
	r = runCLI(t, "audit", "verify", "--file", exp)
	if want := "record " + strings.TrimSpace(jsonNum(seq)) + " does not verify"; r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "altered") {
		t.Fatalf("altered export: %d %q, want %q", r.code, r.stderr, want)
	}
}

func jsonNum(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
