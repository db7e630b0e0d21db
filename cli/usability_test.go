package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// An array's outputs keep their lines: a task with empty stdout prints an
// empty line (output line N is input line N's), --output-dir writes an
// empty file for it, --json an empty output; the template claims no
// phase.
func TestArrayEmptyOutputKeepsItsLine(t *testing.T) {
	c := startNode(t)
	dir := t.TempDir()
	lines := filepath.Join(dir, "in.txt")
	os.WriteFile(lines, []byte("a\nb\n\nc"), 0o600)
	mod := testwasm.Path(t, "reverse")
	r := c.cli("job", "submit", "--wasm", mod, "--inputs", lines, "--wait")
	if r.code != 0 || r.stdout != "a\nb\n\nc\n" {
		t.Fatalf("submit --inputs --wait: want 4 lines, the third empty: %+v", r)
	}
	out := filepath.Join(dir, "out")
	if r := c.cli("job", "submit", "--wasm", mod, "--inputs", lines, "--wait", "--output-dir", out); r.code != 0 || r.stdout != "" {
		t.Fatalf("--output-dir: %+v", r)
	}
	for i, want := range []string{"a", "b", "", "c"} {
		b, err := os.ReadFile(filepath.Join(out, "00000"+string(rune('0'+i))+".out"))
		if err != nil || string(b) != want {
			t.Fatalf("task %d's file: %q %v, want %q", i, b, err, want)
		}
	}
	r = c.cli("job", "submit", "--wasm", mod, "--inputs", lines, "--wait", "--json")
	var doc struct {
		Array map[string]any `json:"array"`
		Tasks []jobJSON      `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 || len(doc.Tasks) != 4 || doc.Tasks[2].Output != "" || doc.Tasks[3].Output != "c" {
		t.Fatalf("--json: %v %+v", err, r)
	}
	tmpl, _ := doc.Array["template"].(map[string]any)
	if _, has := tmpl["phase"]; tmpl == nil || has {
		t.Fatalf("the array's template has a phase (or no template): %v", doc.Array)
	}
	id, _ := doc.Array["id"].(string)
	r = c.cli("job", "get", id, "--json")
	if r.code != 0 || strings.Contains(r.stdout, `"phase"`) {
		t.Fatalf("job get ARRAY --json claims a phase: %+v", r)
	}
}
