package palyrav1

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The label rule: what a node label (node start/join --label k=v) should
// look like. The CLI warns of a label outside it (labels were free-form
// before, and a node so labelled must still start); constraints
// (--constraint k=v, which match labels exactly) are refused only when
// they look like another comparison (ComparisonIn), which no label could
// ever match.
var (
	labelKeyRE   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^[A-Za-z0-9._/:-]{0,256}$`)
)

// LabelRule describes the label rule to people.
const LabelRule = "a key is 1 to 128 letters, digits, '.', '_', '-' or '/', starting and ending with a letter or digit; a value is up to 256 letters, digits, '.', '_', '-', '/' or ':'"

// CheckLabel says what is wrong with the label key=value, or nil.
func CheckLabel(key, value string) error {
	switch {
	case key == "":
		return fmt.Errorf("the key is empty")
	case !labelKeyRE.MatchString(key):
		return fmt.Errorf("key %q is not a label key", key)
	case !labelValueRE.MatchString(value):
		return fmt.Errorf("value %q is not a label value", value)
	}
	return nil
}

// ComparisonIn returns the operator a "k=v" item split at its first '='
// into key and value was meant to have when it is not plain equality
// ("zone!=mars" splits into "zone!" and "mars": "!="), or "".
func ComparisonIn(key, value string) string {
	for _, op := range []string{"!", "<", ">", "~"} {
		if strings.HasSuffix(key, op) {
			return op + "="
		}
	}
	if strings.HasPrefix(value, "=") {
		return "=="
	}
	return ""
}

// CheckText refuses a name, label or key chosen by a caller that holds a
// control character (an escape sequence, a newline, a bell): printed in a
// listing it drives the reader's terminal (sets its title, clears it,
// forges rows). what names the field in the error.
func CheckText(what, s string) error {
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("%s %q holds a control character (%q at byte %d): use printable text", what, s, r, i)
	}
	return nil
}
