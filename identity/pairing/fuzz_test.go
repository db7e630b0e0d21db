package pairing

import (
	"errors"
	"testing"

	"github.com/palyra-mesh/palyra/identity"
)

// FuzzParse checks that Parse never panics, fails only with its sentinel
// errors, and that any code it accepts prints in canonical form and parses
// back to the same code.
func FuzzParse(f *testing.F) {
	for _, kind := range []identity.Kind{identity.KindNode, identity.KindDevice} {
		s := mustNew(f, kind, testFP).String()
		f.Add(s)
		f.Add(s[3:])
		f.Add("p1 " + s[3:])
	}
	for _, s := range []string{"", "P", "P1", "P1-", "P2-00000", "PL-ILOO0", "P1-UUUUU", "P1-\u00e9", "P1\u2013AAAAA", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if err != nil {
			for _, want := range []error{ErrBadLength, ErrBadCharacter, ErrBadChecksum, ErrUnknownVersion} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("Parse(%q): error %v wraps none of the sentinels", s, err)
		}
		out := c.String()
		if !codeFormat.MatchString(out) {
			t.Fatalf("Parse(%q) accepted a code that prints as %q", s, out)
		}
		back, err := Parse(out)
		if err != nil || back != c {
			t.Fatalf("Parse(%q) = %+v, but its String %q parses to %+v, %v", s, c, out, back, err)
		}
		if !c.Kind().Valid() {
			t.Fatalf("Parse(%q) gave kind %q", s, c.Kind())
		}
	})
}
