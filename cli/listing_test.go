package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// Three listings as a new user reads them: pair list shows which codes
// make operators; audit list starts from the newest records (journal
// order with --oldest-first) and pages on with the flag it prints;
// metrics --match that matches nothing says so and exits 1, as grep does.
func TestListingsAsUsersReadThem(t *testing.T) {
	c := startNode(t)

	if r := c.cli("pair", "create", "--kind", "device", "--operator"); r.code != 0 {
		t.Fatalf("pair create: %+v", r)
	}
	r := c.cli("pair", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || !strings.Contains(lines[0], "OPERATOR") || !strings.Contains(r.stdout, "true") {
		t.Fatalf("pair list: %+v; want an OPERATOR column showing the operator code", r)
	}
	r = c.cli("pair", "list", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"operator": true`) {
		t.Fatalf("pair list --json: %+v", r)
	}

	for _, name := range []string{"s1", "s2", "s3", "s4"} {
		if r := c.cliStdin("v", "secret", "set", name); r.code != 0 {
			t.Fatalf("secret set: %+v", r)
		}
	}
	type page struct {
		Records []struct {
			Seq     uint64 `json:"seq"`
			Subject string `json:"subject"`
		} `json:"records"`
		HeadSeq uint64 `json:"head_seq"`
		More    bool   `json:"more"`
	}
	list := func(args ...string) (page, result) {
		t.Helper()
		r := c.cli(append([]string{"audit", "list", "--json"}, args...)...)
		var p page
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || r.code != 0 {
			t.Fatalf("audit list %v: %v %+v", args, err, r)
		}
		return p, r
	}
	newest, _ := list("--limit", "2")
	if len(newest.Records) != 2 || newest.Records[0].Seq != newest.HeadSeq || newest.Records[1].Seq != newest.HeadSeq-1 ||
		newest.Records[0].Subject != "secret:s4" || !newest.More {
		t.Fatalf("audit list --limit 2: %+v; want the two newest records, newest first, and more", newest)
	}
	r = c.cli("audit", "list", "--limit", "2")
	next := "older records: --before " + itoa(newest.HeadSeq-1)
	if r.code != 0 || !strings.Contains(r.stderr, next) || strings.Index(r.stdout, "secret:s4") > strings.Index(r.stdout, "secret:s3") {
		t.Fatalf("audit list --limit 2: %+v; want s4 above s3 and %q", r, next)
	}
	older, _ := list("--limit", "2", "--before", itoa(newest.HeadSeq-1))
	if len(older.Records) != 2 || older.Records[0].Seq != newest.HeadSeq-2 || older.Records[0].Subject != "secret:s2" {
		t.Fatalf("audit list --before: %+v; want the next two older records", older)
	}
	oldest, _ := list("--limit", "2", "--oldest-first")
	if len(oldest.Records) != 2 || oldest.Records[0].Seq != 1 || oldest.Records[1].Seq != 2 || !oldest.More {
		t.Fatalf("audit list --oldest-first: %+v; want records 1 and 2", oldest)
	}
	if all, _ := list(); len(all.Records) != int(all.HeadSeq) || all.More {
		t.Fatalf("audit list: %d records of %d, more=%v; want all of them", len(all.Records), all.HeadSeq, all.More)
	}

	r = c.cli("metrics", "--match", "nosuch")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, `no metric name contains "nosuch"`) {
		t.Fatalf("metrics --match nosuch: %+v; want exit 1 and a note on stderr", r)
	}
	r = c.cli("metrics", "--match", "nosuch", "--json")
	if r.code != 1 || !strings.Contains(r.stdout, `"series": []`) {
		t.Fatalf("metrics --match nosuch --json: %+v; want an empty list and exit 1", r)
	}
	if r := c.cli("metrics", "--match", "palyra_raft_leader"); r.code != 0 || !strings.Contains(r.stdout, "palyra_raft_leader") {
		t.Fatalf("metrics --match palyra_raft_leader: %+v", r)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
