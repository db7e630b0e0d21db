package wasm

import (
	"strings"
	"testing"
)

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0:                 "0 bytes",
		100:               "100 bytes",
		64 << 10:          "64 KiB",
		16 << 20:          "16 MiB",
		3 << 29:           "1.5 GiB",
		(16 << 20) + 1:    "16777217 bytes",
		20<<20 + 65536:    "20.1 MiB",
		(1 << 20) * 3 / 2: "1.5 MiB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "",
		"one\ntwo\n\n":             "two",
		"panic: boom\n\tat x\n":    "at x",
		"bell\x07 and\tTAB\r\n":    "bell? and TAB",
		"bad utf8 \xff\xfe here\n": "bad utf8 ?? here",
	} {
		if got := lastLine([]byte(in)); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("é", 500)
	got := lastLine([]byte(long))
	if !strings.HasPrefix(got, "…") || len(got) > maxMessage+len("…") || !strings.HasSuffix(got, "é") {
		t.Errorf("lastLine(long) = %q (%d bytes), want a bounded tail", got, len(got))
	}
}

func TestFirstLine(t *testing.T) {
	if got := firstLine("\n  wasm error: unreachable\nwasm stack trace:\n"); got != "wasm error: unreachable" {
		t.Errorf("firstLine = %q", got)
	}
	if got := firstLine(strings.Repeat("x", 1000)); len(got) > maxMessage+len("…") {
		t.Errorf("firstLine did not bound its result (%d bytes)", len(got))
	}
}
