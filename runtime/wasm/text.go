package wasm

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxMessage bounds one-line messages built from guest-controlled text.
const maxMessage = 200

// humanBytes renders a size the way users write limits: "16 MiB", "1.5 MiB",
// "64 KiB", "100 bytes". A fraction gets as many decimals (up to three) as it
// takes not to look whole, so 16 MiB + 1 B never prints as "16 MiB".
func humanBytes(n uint64) string {
	units := []struct {
		size uint64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}}
	for _, u := range units {
		if n < u.size {
			continue
		}
		if n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
		v := float64(n) / float64(u.size)
		for prec := 1; prec <= 3; prec++ {
			s := strconv.FormatFloat(v, 'f', prec, 64)
			if strings.TrimRight(s[strings.IndexByte(s, '.')+1:], "0") != "" {
				return s + " " + u.name
			}
		}
		break
	}
	return fmt.Sprintf("%d bytes", n)
}

// firstLine returns the first non-empty line of s, trimmed and bounded.
func firstLine(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return clip(line)
		}
	}
	return ""
}

// lastLine returns the last non-empty line of guest output as printable,
// bounded text (the tail of stderr is what explains a failed exit).
func lastLine(b []byte) string {
	s := strings.TrimRight(string(b), " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.Map(func(r rune) rune {
		if r == '\t' {
			return ' '
		}
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > maxMessage { // keep the end: it is a tail
		cut := len(s) - maxMessage
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		s = "…" + s[cut:]
	}
	return s
}

// clip bounds s to maxMessage bytes on a rune boundary.
func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
