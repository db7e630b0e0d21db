package wasm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
)

// guestBuilds caches buildGuestExample results in this process.
var guestBuilds sync.Map // name → []byte

// buildGuestExample builds examples/<name>, which imports the guest SDK,
// for wasip1. internal/testwasm keys its cache on the example's own files
// only, so a change to runtime/wasm/guest or abi would not rebuild it;
// this key covers those too. Builds are cached under os.TempDir().
func buildGuestExample(tb testing.TB, name string) []byte {
	tb.Helper()
	if b, ok := guestBuilds.Load(name); ok {
		return b.([]byte)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		tb.Fatal(err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "go=%s\n", goruntime.Version())
	for _, dir := range []string{"examples/" + name, "runtime/wasm/guest", "runtime/wasm/abi"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			tb.Fatalf("no Go files in %s: %v", dir, err)
		}
		slices.Sort(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				tb.Fatal(err)
			}
			fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
			h.Write(b)
		}
	}
	dir := filepath.Join(os.TempDir(), "palyra-wasm-guest-examples")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(dir, name+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".wasm")
	if b, err := os.ReadFile(out); err == nil {
		guestBuilds.Store(name, b)
		return b
	}
	tmp, err := os.CreateTemp(dir, name+"-*.tmp")
	if err != nil {
		tb.Fatal(err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(goruntime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", tmp.Name(), "./examples/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building examples/%s for wasip1: %v\n%s", name, err, msg)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	guestBuilds.Store(name, b)
	return b
}
