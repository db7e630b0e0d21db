// Package archtest holds the line on the architecture in BRIEF.md: the
// dependency direction between the top-level packages, and a scheduler with
// no I/O. It fails when a package gains a forbidden import.
package archtest

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const mod = "github.com/palyra-mesh/palyra/"

// imports maps each package of the module to its direct imports.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := make(map[string][]string)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		m[strings.TrimPrefix(f[0], mod)] = f[1:]
	}
	return m
}

func under(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }

func TestDependencyDirection(t *testing.T) {
	rules := []struct {
		pkg       string   // package tree the rule applies to
		forbidden []string // trees of this module it must not import
		exact     bool     // the package only, not its subtree
	}{
		{"proto", []string{"cli", "node", "consensus", "mesh", "runtime", "identity", "internal"}, false},
		{"consensus", []string{"mesh", "node", "runtime", "cli", "identity"}, false},
		{"runtime", []string{"consensus", "mesh", "node", "cli", "identity"}, false},
		{"mesh", []string{"consensus", "node", "runtime", "cli", "identity", "proto"}, false},
		{"identity", []string{"consensus", "mesh", "node", "runtime", "cli"}, false},
		{"cli", []string{"consensus", "mesh", "runtime"}, false},
		// The planner is pure; its driver (the leader's loop) reads the
		// replicated state and proposes commands, but knows nothing of the
		// network, executors, identities or the other node parts.
		{"node/scheduler", []string{"consensus", "mesh", "runtime", "identity", "proto", "cli"}, true},
		{"node/scheduler/driver", []string{"mesh", "runtime", "identity", "cli", "node/api", "node/cluster", "node/worker", "node/blob"}, false},
	}
	all := imports(t)
	if len(all) < 10 {
		t.Fatalf("go list found only %d packages", len(all))
	}
	for pkg, imps := range all {
		for _, r := range rules {
			if !under(pkg, r.pkg) || (r.exact && pkg != r.pkg) {
				continue
			}
			for _, imp := range imps {
				if !strings.HasPrefix(imp, mod) {
					continue
				}
				dep := strings.TrimPrefix(imp, mod)
				for _, f := range r.forbidden {
					if under(dep, f) {
						t.Errorf("%s imports %s: %s must not depend on %s (see ../shared/BRIEF.md)", pkg, dep, r.pkg, f)
					}
				}
			}
		}
	}
}

// The scheduler is a pure function: no clocks, randomness, files or network.
func TestSchedulerIsPure(t *testing.T) {
	banned := []string{"time", "math/rand", "math/rand/v2", "crypto/rand", "os", "net", "io", "sync"}
	for _, imp := range imports(t)["node/scheduler"] {
		for _, b := range banned {
			if imp == b || strings.HasPrefix(imp, b+"/") {
				t.Errorf("node/scheduler imports %s; placement must stay pure", imp)
			}
		}
	}
}

// The FSM's files may not import clocks or randomness: Apply must be a
// deterministic function of the log.
func TestFSMIsDeterministic(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", mod+"consensus").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := strings.TrimSpace(string(out))
	fset := token.NewFileSet()
	for _, f := range []string{"fsm.go", "state.go", "job.go", "codec.go", "phase.go"} {
		file, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			switch strings.Trim(imp.Path.Value, `"`) {
			case "time", "math/rand", "math/rand/v2", "crypto/rand", "os":
				t.Errorf("consensus/%s imports %s: the FSM must be deterministic", f, imp.Path.Value)
			}
		}
	}
}
