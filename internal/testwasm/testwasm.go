// Package testwasm builds the example guest programs in examples/ into
// WebAssembly modules for tests and benchmarks.
//
// Builds are cached under os.TempDir() keyed by a hash of the Go version and
// the example's source files, so repeated test runs and many test packages
// share one build. Concurrent use, from goroutines or from several test
// processes, is safe: each build is written to a temporary file and renamed
// into place.
package testwasm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// cacheDirName is the directory under os.TempDir() holding built modules.
const cacheDirName = "palyra-testwasm"

var (
	mu     sync.Mutex
	built  = map[string]string{} // example name → built path, this process
	goTool string                // path of the go command, found once
)

// Build returns the wasm bytes of examples/<name>, building it if needed.
func Build(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(Path(tb, name))
	if err != nil {
		tb.Fatalf("testwasm: reading built %s: %v", name, err)
	}
	return b
}

// Path returns the path of the built wasm module for examples/<name>,
// building it if needed. The file is shared: do not modify it.
func Path(tb testing.TB, name string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	p, err := build(name)
	if err != nil {
		tb.Fatalf("testwasm: %v", err)
	}
	built[name] = p
	return p
}

func build(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\.`) {
		return "", fmt.Errorf("bad example name %q: want a directory name under examples/", name)
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, "examples", name)
	if info, err := os.Stat(src); err != nil || !info.IsDir() {
		return "", fmt.Errorf("no example %q: %s is not a directory", name, src)
	}
	gocmd, err := findGo()
	if err != nil {
		return "", err
	}
	version, err := output(gocmd, root, "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	key, err := sourceHash(src, version)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), cacheDirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating build cache: %w", err)
	}
	final := filepath.Join(dir, name+"-"+key[:16]+".wasm")
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}

	tmp, err := os.CreateTemp(dir, name+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("creating build output: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	cmd := exec.Command(gocmd, "build", "-trimpath", "-o", tmp.Name(), "./examples/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building examples/%s for wasip1: %v\n%s", name, err, out)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("storing built module: %w", err)
	}
	return final, nil
}

// repoRoot walks up from the working directory to the directory holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory; run tests from inside the repository")
		}
		dir = parent
	}
}

// findGo locates the go command of the toolchain that runs the tests:
// $GOROOT/bin/go, else go on PATH; then asks it for its own GOROOT so the
// build uses that toolchain's go binary.
func findGo() (string, error) {
	if goTool != "" {
		return goTool, nil
	}
	var candidates []string
	if gr := os.Getenv("GOROOT"); gr != "" {
		candidates = append(candidates, filepath.Join(gr, "bin", "go"))
	}
	if p, err := exec.LookPath("go"); err == nil {
		candidates = append(candidates, p)
	}
	candidates = append(candidates, "/usr/local/go/bin/go")
	for _, c := range candidates {
		goroot, err := output(c, "", "env", "GOROOT")
		if err != nil {
			continue
		}
		p := filepath.Join(goroot, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			goTool = p
			return p, nil
		}
	}
	return "", fmt.Errorf("no go command found (tried %s); install Go or put it on PATH", strings.Join(candidates, ", "))
}

func output(cmdPath, dir string, args ...string) (string, error) {
	cmd := exec.Command(cmdPath, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", cmdPath, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// sourceHash hashes the Go version and every file under src and under the
// guest SDK the examples may import (runtime/wasm/guest and abi), names and
// contents in a fixed order: everything an example's build depends on
// besides the standard library.
func sourceHash(src, goVersion string) (string, error) {
	root := filepath.Dir(filepath.Dir(src))
	var files []string
	for _, dir := range []string{src, filepath.Join(root, "runtime", "wasm", "guest"), filepath.Join(root, "runtime", "wasm", "abi")} {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() && !strings.HasSuffix(p, "_test.go") {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("reading example sources: %w", err)
		}
	}
	slices.Sort(files)
	h := sha256.New()
	fmt.Fprintf(h, "go=%s\n", goVersion)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("reading example sources: %w", err)
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
