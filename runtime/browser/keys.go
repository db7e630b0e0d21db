package browser

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chromedp/chromedp/kb"
)

// namedKeys maps the key names a "press" step accepts to what chromedp's
// KeyEvent sends.
var namedKeys = map[string]string{
	"Enter":      kb.Enter,
	"Tab":        kb.Tab,
	"Escape":     kb.Escape,
	"Backspace":  kb.Backspace,
	"Delete":     kb.Delete,
	"ArrowUp":    kb.ArrowUp,
	"ArrowDown":  kb.ArrowDown,
	"ArrowLeft":  kb.ArrowLeft,
	"ArrowRight": kb.ArrowRight,
	"Home":       kb.Home,
	"End":        kb.End,
	"PageUp":     kb.PageUp,
	"PageDown":   kb.PageDown,
	"Space":      " ",
}

var keyNames = func() string {
	var names []string
	for k := range namedKeys {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}()

// keyFor resolves a "press" key: a name from namedKeys or one printable
// character.
func keyFor(key string) (string, error) {
	if k, ok := namedKeys[key]; ok {
		return k, nil
	}
	if r, size := utf8.DecodeRuneInString(key); r != utf8.RuneError && size == len(key) && unicode.IsPrint(r) {
		return key, nil
	}
	return "", fmt.Errorf("key %q is not a single printable character or one of %s", truncate(key, 32), keyNames)
}
