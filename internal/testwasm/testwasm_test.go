package testwasm

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
)

func TestBuildReverse(t *testing.T) {
	var wg sync.WaitGroup
	got := make([][]byte, 4)
	for i := range got {
		wg.Go(func() { got[i] = Build(t, "reverse") })
	}
	wg.Wait()
	if !bytes.HasPrefix(got[0], []byte("\x00asm\x01\x00\x00\x00")) {
		t.Fatalf("built module starts with % x, want the wasm header", got[0][:min(8, len(got[0]))])
	}
	for i := range got {
		if !bytes.Equal(got[i], got[0]) {
			t.Errorf("concurrent Build %d returned different bytes", i)
		}
	}
	p := Path(t, "reverse")
	if p != Path(t, "reverse") {
		t.Error("Path is not stable")
	}
	if !strings.HasPrefix(p, os.TempDir()) || !strings.HasSuffix(p, ".wasm") {
		t.Errorf("Path = %q, want a .wasm file under %s", p, os.TempDir())
	}
}

func TestBuildRefusesBadNames(t *testing.T) {
	for _, name := range []string{"", "../go.mod", "no-such-example", "a/b"} {
		if _, err := build(name); err == nil {
			t.Errorf("build(%q) succeeded, want an error", name)
		}
	}
}

func TestSourceHashChangesWithSource(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/main.go", []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := sourceHash(dir, "go1.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/main.go", []byte("package main // changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := sourceHash(dir, "go1.0")
	c, _ := sourceHash(dir, "go2.0")
	if a == b || b == c {
		t.Errorf("hashes %s %s %s: want a change of source or Go version to change the key", a, b, c)
	}
}
