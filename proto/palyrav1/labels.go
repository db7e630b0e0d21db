package palyrav1

import (
	"fmt"
	"regexp"
	"strings"
)

// Node labels (node start/join --label k=v) and job constraints
// (--constraint k=v, which match labels exactly) follow one rule, checked
// by the CLI and by every node: a constraint that could never be a label
// would keep its job waiting for ever.
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
