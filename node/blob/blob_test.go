package blob

import (
	"errors"
	"os"
	"testing"
)

func TestPutGetVerify(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Put([]byte("hello"))
	if err != nil || h != Hash([]byte("hello")) || !s.Has(h) {
		t.Fatalf("put: %s %v", h, err)
	}
	if h2, _ := s.Put([]byte("hello")); h2 != h {
		t.Fatal("second put changed the name")
	}
	if got, err := s.Get(h); err != nil || string(got) != "hello" {
		t.Fatalf("get: %q %v", got, err)
	}
	if err := os.WriteFile(s.path(h), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(h); !errors.Is(err, ErrNotFound) {
		t.Fatalf("corrupt blob served: %v", err)
	}
	if s.Has(h) {
		t.Fatal("corrupt blob kept")
	}
	if _, err := s.Get("../../etc/passwd"); err == nil {
		t.Fatal("path traversal accepted")
	}
	if _, err := s.Get(Hash([]byte("absent"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent: %v", err)
	}
}
