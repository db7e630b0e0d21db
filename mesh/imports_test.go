package mesh_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// mesh sits at the bottom of the dependency graph: its production code
// imports nothing of this repository (node wires it to identity/consensus).
func TestMeshImportsNothingOfOurs(t *testing.T) {
	const module = "github.com/palyra-mesh/palyra/"
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) {
				t.Errorf("%s imports %s; mesh must not depend on other packages of this repo", f, path)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no source files found; is the test running in the mesh directory?")
	}
}
