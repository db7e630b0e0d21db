package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMESkillExampleNamesRealFiles: the README's skills example works
// from a clone: every repository file it copies or packs exists, and the
// skill and tool it runs are those of a manifest under examples/skills
// (it used to pack ./echo and run acme.echo, neither of which exists).
// The commands themselves were tried by hand against a node.
func TestREADMESkillExampleNamesRealFiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "## Skills, approvals, hooks")
	if start < 0 {
		t.Fatal("no skills section")
	}
	s = s[start:]
	block := s[strings.Index(s, "```sh")+5:]
	block = block[:strings.Index(block, "```")]
	for _, m := range regexp.MustCompile(`(?:^|\s)((?:examples)/[\w./-]+)`).FindAllStringSubmatch(block, -1) {
		if _, err := os.Stat(filepath.Join("..", m[1])); err != nil {
			t.Errorf("the README's skill example names %s: %v", m[1], err)
		}
	}
	for _, m := range regexp.MustCompile(`bin/examples/(\w+)\.wasm`).FindAllStringSubmatch(block, -1) {
		if _, err := os.Stat(filepath.Join("..", "examples", m[1], "main.go")); err != nil {
			t.Errorf("the README's skill example uses bin/examples/%s.wasm, which 'make examples' does not build", m[1])
		}
	}
	runs := regexp.MustCompile(`palyra skill run (\S+) (\S+)`).FindAllStringSubmatch(block, -1)
	if len(runs) == 0 {
		t.Fatal("the README's skill example runs no tool")
	}
	manifests, _ := filepath.Glob(filepath.Join("..", "examples", "skills", "*", "skill.toml"))
	for _, r := range runs {
		found := false
		for _, f := range manifests {
			m, _ := os.ReadFile(f)
			found = found || strings.Contains(string(m), `skill_id = "`+r[1]+`"`) && strings.Contains(string(m), `id = "`+r[2]+`"`)
		}
		if !found {
			t.Errorf("the README runs %s %s: no manifest under examples/skills has that skill and tool", r[1], r[2])
		}
	}
	for _, m := range regexp.MustCompile(`skill pack (\S+)`).FindAllStringSubmatch(block, -1) {
		dir := strings.TrimPrefix(m[1], "./")
		if !strings.Contains(block, "mkdir -p "+dir+"/modules") {
			t.Errorf("the README packs %s, which it does not make", m[1])
		}
	}
}
