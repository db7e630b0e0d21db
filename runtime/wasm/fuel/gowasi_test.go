package fuel

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// goGuest is a small CPU-bound Go program in the shape of a Palyra example
// job: read stdin, compute, print.
const goGuest = `package main

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
	"sort"
	"strings"
)

func main() {
	in, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	words := strings.Fields(in)
	counts := map[string]int{}
	for i := 0; i < 2000; i++ {
		for _, w := range words {
			counts[fmt.Sprintf("%s-%d", w, i%7)]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%d;", k, counts[k])
	}
	fmt.Printf("%d keys, sha256 %x\n", len(keys), h.Sum(nil))
}
`

// buildGoGuest compiles goGuest with GOOS=wasip1 and caches the binary
// under os.TempDir, keyed by the source and the Go version.
func buildGoGuest(t *testing.T) []byte {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	sum := sha256.Sum256([]byte(goGuest + runtime.Version()))
	dir := filepath.Join(os.TempDir(), "palyra-fuel-goguest-"+hex.EncodeToString(sum[:8]))
	wasmPath := filepath.Join(dir, "guest.wasm")
	if b, err := os.ReadFile(wasmPath); err == nil {
		return b
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module guest\n\ngo 1.21\n")
	write("main.go", goGuest)
	tmp := filepath.Join(dir, "guest.wasm.tmp")
	cmd := exec.Command(goBin, "build", "-o", tmp, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the Go wasip1 guest: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, wasmPath); err != nil { // atomic: parallel test runs share the cache
		t.Fatal(err)
	}
	b, err := os.ReadFile(wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoWASIGuest instruments a real Go wasip1 binary (the runtime's
// scheduler, GC and big br_table dispatch loops) and runs it under WASI.
func TestGoWASIGuest(t *testing.T) {
	p := newPair(t, buildGoGuest(t))
	spec := runSpec{stdin: "alpha beta gamma delta epsilon alpha\n"}
	want := p.unmetered(t, spec)
	if want.err != nil || want.stdout == "" {
		t.Fatalf("unmetered: %q %v", want.stdout, want.err)
	}
	first := p.meter(t, big, spec)
	second := p.meter(t, big, spec)
	if first.err != nil || second.err != nil {
		t.Fatalf("metered: %v / %v", first.err, second.err)
	}
	if first.stdout != want.stdout || second.stdout != want.stdout {
		t.Fatalf("metered output %q, want %q", first.stdout, want.stdout)
	}
	if first.remaining != second.remaining {
		t.Fatalf("fuel differs between runs: %d vs %d", Used(big, first.remaining), Used(big, second.remaining))
	}
	need := Used(big, first.remaining)
	t.Logf("Go guest used %d fuel", need)
	if o := p.meter(t, need/2, spec); !IsOutOfFuel(o.err, o.remaining) {
		t.Fatalf("half the budget: %v, %d left", o.err, o.remaining)
	}
}
