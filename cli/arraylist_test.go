package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// 'job list --arrays' lists the arrays themselves, newest first, with
// their counts and a cursor; a job list page of tasks says how to get
// there; --arrays with a job filter is refused.
func TestJobListArrays(t *testing.T) {
	c := startNode(t)
	dir := t.TempDir()
	var ids []string
	for i, body := range []string{"a\nb\nc\n", "x\ny\n"} {
		lines := filepath.Join(dir, "in"+string(rune('0'+i)))
		os.WriteFile(lines, []byte(body), 0o600)
		r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--inputs", lines, "--wait", "--json")
		var out struct{ Array arrayJSON }
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Array.ID == "" {
			t.Fatalf("submit array %d: %+v", i, r)
		}
		ids = append(ids, out.Array.ID)
	}
	c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "single", "--wait")

	r := c.cli("job", "list", "--arrays")
	if r.code != 0 || strings.Index(r.stdout, ids[1]) < 0 || strings.Index(r.stdout, ids[1]) > strings.Index(r.stdout, ids[0]) ||
		!strings.Contains(r.stdout, "3 completed") || !strings.Contains(r.stdout, "2 completed") {
		t.Fatalf("job list --arrays (newest first, with counts): %+v", r)
	}
	r = c.cli("job", "list", "--arrays", "--limit", "1", "--json")
	var page struct {
		Arrays      []arrayJSON
		NextAfterID string `json:"next_after_id"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Arrays) != 1 || page.Arrays[0].ID != ids[1] ||
		page.NextAfterID != ids[1] || page.Arrays[0].Counts["completed"] != 2 {
		t.Fatalf("first page of one: %+v", r)
	}
	if r := c.cli("job", "list", "--arrays", "--limit", "1", "--oldest-first"); r.code != 0 || !strings.Contains(r.stdout, ids[0]) ||
		!strings.Contains(r.stderr, "palyra job list --arrays --limit 1 --oldest-first --after "+ids[0]) {
		t.Fatalf("the next page's command keeps the page's flags: %+v", r)
	}
	r = c.cli("job", "list", "--arrays", "--after", page.NextAfterID, "--json")
	page.NextAfterID = ""
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Arrays) != 1 || page.Arrays[0].ID != ids[0] || page.NextAfterID != "" {
		t.Fatalf("second page: %+v", r)
	}
	if r := c.cli("job", "list"); r.code != 0 || !strings.Contains(r.stderr, "5 of these are tasks of job arrays") || !strings.Contains(r.stderr, "--arrays") {
		t.Fatalf("job list with tasks does not point at --arrays: %+v", r)
	}
	if r := c.cli("job", "list", "--arrays", "--phase", "failed"); r.code != exitUsage || !strings.Contains(r.stderr, "--phase filters jobs") {
		t.Fatalf("--arrays with --phase: %+v", r)
	}
}
