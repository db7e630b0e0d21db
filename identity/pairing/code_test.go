package pairing

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/identity"
)

var codeFormat = regexp.MustCompile(`^P1(-[0-9A-HJKMNP-TV-Z]{5}){5}$`)

func TestRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for i := range 1000 {
		kind := identity.KindNode
		if i%2 == 1 {
			kind = identity.KindDevice
		}
		c := mustNew(t, kind, testFP)
		s := c.String()
		if !codeFormat.MatchString(s) || len(s) != 32 {
			t.Fatalf("String() = %q, want P1- and five groups of five Crockford characters", s)
		}
		if seen[s] {
			t.Fatalf("New made %q twice", s)
		}
		seen[s] = true
		if got := c.IDString(); got != s[3:8] {
			t.Fatalf("IDString() = %q, want the first group of %q", got, s)
		}
		back, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if back != c {
			t.Fatalf("Parse(%q) = %+v, want %+v", s, back, c)
		}
		if back.Kind() != kind {
			t.Fatalf("kind = %q, want %q", back.Kind(), kind)
		}
	}
}

func TestParseTolerant(t *testing.T) {
	var c Code
	// Find a code with a 1 and a 0 so the look-alike substitutions matter.
	for {
		c = mustNew(t, identity.KindDevice, testFP)
		if s := c.String()[3:]; strings.Contains(s, "1") && strings.Contains(s, "0") {
			break
		}
	}
	s := c.String()
	payload := strings.ReplaceAll(s[3:], "-", "")
	variants := map[string]string{
		"lower case":     strings.ToLower(s),
		"spaces":         strings.ReplaceAll(s, "-", " "),
		"no separators":  "P1" + payload,
		"odd spacing":    "  p1 -" + payload[:3] + " " + payload[3:11] + "--" + payload[11:] + "\n",
		"en dashes":      strings.ReplaceAll(s, "-", "–"),
		"I for 1":        "P1-" + strings.ReplaceAll(s[3:], "1", "I"),
		"l for 1":        strings.ReplaceAll(s, "1", "l"),
		"L for 1":        "PL-" + strings.ReplaceAll(s[3:], "1", "L"),
		"O and o for 0":  "P1-" + strings.ReplaceAll(strings.ReplaceAll(s[3:], "0", "O"), "OO", "oO"),
		"tabs":           strings.ReplaceAll(s, "-", "\t"),
		"mixed case all": strings.ToLower(s[:10]) + s[10:],
	}
	for name, v := range variants {
		got, err := Parse(v)
		if err != nil {
			t.Errorf("%s: Parse(%q): %v", name, v, err)
			continue
		}
		if got != c {
			t.Errorf("%s: Parse(%q) gave a different code", name, v)
		}
	}
}

// TestEverySubstitutionCaught changes each character of many codes to every
// other character and swaps every pair of neighbours: the CRC must catch
// all of them (not just most).
func TestEverySubstitutionCaught(t *testing.T) {
	for range 40 {
		s := mustNew(t, identity.KindNode, testFP).String()
		for i := 3; i < len(s); i++ {
			if s[i] == '-' {
				continue
			}
			for _, r := range alphabet {
				if byte(r) == s[i] {
					continue
				}
				typo := s[:i] + string(r) + s[i+1:]
				if _, err := Parse(typo); !errors.Is(err, ErrBadChecksum) {
					t.Fatalf("Parse(%q), one typo in %q: err = %v, want ErrBadChecksum", typo, s, err)
				}
			}
		}
		payload := strings.ReplaceAll(s[3:], "-", "")
		for i := 0; i+1 < len(payload); i++ {
			if payload[i] == payload[i+1] {
				continue
			}
			b := []byte(payload)
			b[i], b[i+1] = b[i+1], b[i]
			if _, err := Parse("P1" + string(b)); !errors.Is(err, ErrBadChecksum) {
				t.Fatalf("swapping characters %d and %d of %q: err = %v, want ErrBadChecksum", i+1, i+2, s, err)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	good := mustNew(t, identity.KindNode, testFP).String() // P1-XXXXX-...
	tests := []struct {
		name  string
		in    string
		want  error
		parts []string
	}{
		{"empty", "", ErrBadLength, []string{"empty"}},
		{"blank", "  - ", ErrBadLength, []string{"empty"}},
		{"prefix only", "P1-", ErrBadLength, []string{"0 characters", "want 25"}},
		{"one short", good[:len(good)-1], ErrBadLength, []string{"24 characters", "want 25"}},
		{"one extra", good + "7", ErrBadLength, []string{"26 characters", "want 25"}},
		{"U", good[:8] + "U" + good[9:], ErrBadCharacter, []string{"'U' at position 9", "except U"}},
		{"star", good[:4] + "*" + good[5:], ErrBadCharacter, []string{"'*' at position 5"}},
		{"non-ASCII", "P1-é" + good[4:], ErrBadCharacter, []string{"'é' at position 4"}},
		{"version 2", "P2" + good[2:], ErrUnknownVersion, []string{`"P2"`, "reads P1 codes"}},
		{"no prefix", good[3:], ErrUnknownVersion, []string{`starts with "P1-"`}},
		{"other prefix", "X1" + good[2:], ErrUnknownVersion, []string{`'X'`, "position 1"}},
		{"checksum", good[:len(good)-1] + flip(good[len(good)-1]), ErrBadChecksum, []string{"mistyped? check the code"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse(%q): err = %v, want %v", tt.in, err, tt.want)
			}
			wantErr(t, err, tt.parts...)
		})
	}
}

// flip returns an alphabet character other than b.
func flip(b byte) string {
	if b == 'A' {
		return "B"
	}
	return "A"
}

func TestNewRejectsBadInput(t *testing.T) {
	for _, fp := range []string{"", "xyz", testFP[:62], testFP + "00", strings.Repeat("g", 64)} {
		if _, err := New(identity.KindNode, fp); !errors.Is(err, ErrBadFingerprint) {
			t.Errorf("New(node, %q): err = %v, want ErrBadFingerprint", fp, err)
		}
	}
	_, err := New("robot", testFP)
	wantErr(t, err, `unknown kind "robot"`)
}

func TestPinMatches(t *testing.T) {
	rootDER := []byte("pretend this is a root certificate")
	sum := sha256.Sum256(rootDER)
	fp := hex.EncodeToString(sum[:])
	// Upper case and colons, as openssl prints it, pin the same CA.
	var colons []string
	for i := 0; i < len(fp); i += 2 {
		colons = append(colons, strings.ToUpper(fp[i:i+2]))
	}
	for _, form := range []string{fp, strings.Join(colons, ":")} {
		c := mustNew(t, identity.KindNode, form)
		if !c.PinMatches(rootDER) {
			t.Fatalf("code made for %q does not match its own root", form)
		}
		if c.PinMatches(append(rootDER, 0)) {
			t.Fatalf("code matches a different root")
		}
	}
	// The pin is keyed by the secret: codes for one CA carry different pins,
	// so nobody can search for a matching CA without the code.
	pins := map[uint32]bool{}
	for range 200 {
		pins[mustNew(t, identity.KindNode, fp).pin] = true
	}
	if len(pins) < 190 {
		t.Fatalf("200 codes for one CA have only %d distinct pins; the pin must depend on the secret", len(pins))
	}
}

func TestSecretHash(t *testing.T) {
	c := mustNew(t, identity.KindNode, testFP)
	h := c.SecretHash()
	if len(h) != sha256.Size || !bytes.Equal(h, SecretHash(c.Secret())) {
		t.Fatalf("SecretHash = %x, want 32 bytes equal to SecretHash(Secret())", h)
	}
	plain := sha256.Sum256(c.Secret())
	if bytes.Equal(h, plain[:]) {
		t.Fatal("SecretHash is a bare SHA-256 of the secret; it must be domain-separated")
	}
	sec := c.Secret()
	sec[0] ^= 1
	if bytes.Equal(c.Secret(), sec) {
		t.Fatal("Secret() returned the code's own array, not a copy")
	}
}

func TestLogValueHidesSecret(t *testing.T) {
	c := mustNew(t, identity.KindDevice, testFP)
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("made code", "code", c)
	out := buf.String()
	if !strings.Contains(out, c.IDString()) || !strings.Contains(out, "device") {
		t.Fatalf("log %q lacks the code's ID or kind", out)
	}
	if strings.Contains(out, c.String()[9:]) {
		t.Fatalf("log %q contains the secret part of %q", out, c.String())
	}
}
