package identity

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmallstepStaysInStepGo holds the line that only step.go imports the
// heavy github.com/smallstep/certificates module.
func TestSmallstepStaysInStepGo(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			if strings.HasPrefix(strings.Trim(imp.Path.Value, `"`), "github.com/smallstep/") && name != "step.go" {
				t.Errorf("%s imports %s; keep smallstep behind step.go", name, imp.Path.Value)
			}
		}
	}
	if checked < 2 {
		t.Fatalf("checked only %d files; run from the package directory", checked)
	}
}
