package cli

import (
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// interspersed rewrites args so flags given after positional arguments
// ("palyra job get ID --json") are parsed, as users expect: urfave/cli v2
// stops parsing flags at the first positional. It walks the command path,
// then moves each later flag (with its value, for non-boolean flags) in
// front of the positionals. A "--" ends flag handling.
func interspersed(app *ucli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	cmds, flags := app.Commands, app.Flags
	var globals []string // global flags found after the command path
	// early are flags before the command path that its level does not
	// define ("palyra --json status"): the command's own, given early.
	var early []string
	i := 1
	// Global flags and the command path.
	for i < len(args) {
		a := args[i]
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" && !defines(flags, a) && !takesValue(flags, a) && !builtinFlag(a) {
			early = append(early, a)
			i++
			continue
		}
		if strings.HasPrefix(a, "-") {
			out = append(out, a)
			if takesValue(flags, a) && i+1 < len(args) {
				out = append(out, args[i+1])
				i++
			}
			i++
			continue
		}
		var next *ucli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
			}
		}
		if next == nil {
			if len(cmds) > 0 {
				// Not one of this level's commands (a typo: 'job sumbit
				// --wasm x'): leave the rest as typed, so the CLI names the
				// unknown command and suggests one, instead of refusing
				// flags it would have moved ahead of it.
				// Flags held before it go after it, so its error (and
				// its suggestion) comes first: "palyra --json job sumbit".
				return append(append(out, args[i:]...), early...)
			}
			break
		}
		out = append(out, a)
		i++
		cmds, flags = next.Subcommands, next.Flags
		if len(cmds) == 0 {
			break
		}
	}
	var flagArgs, positional []string
	for _, a := range early {
		if defines(flags, a) && !takesValue(flags, a) {
			flagArgs = append(flagArgs, a) // the command's flag: it reads it
		} else {
			globals = append(globals, a) // left where it was: the CLI names it as unknown
		}
	}
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-" && !defines(flags, a) && defines(app.Flags, a):
			// A global flag after the subcommand (--data-dir, --addr …):
			// move it before the command path, where urfave/cli reads it.
			globals = append(globals, a)
			if takesValue(app.Flags, a) && i+1 < len(args) {
				globals = append(globals, args[i+1])
				i++
			}
		case strings.HasPrefix(a, "-") && a != "-":
			flagArgs = append(flagArgs, a)
			if takesValue(flags, a) && i+1 < len(args) {
				flagArgs = append(flagArgs, args[i+1])
				i++
			}
		default:
			positional = append(positional, a)
		}
	}
	out = append(out, flagArgs...)
	out = append(out, positional...)
	if len(globals) > 0 {
		out = append(append([]string{out[0]}, globals...), out[1:]...)
	}
	return out
}

// defines reports whether flag token a names one of flags.
func defines(flags []ucli.Flag, a string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// takesValue reports whether flag token a (e.g. "--wasm", "-wasm") names a
// non-boolean flag given without "=value".
func takesValue(flags []ucli.Flag, a string) bool {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				if bf, ok := f.(*ucli.BoolFlag); ok && bf != nil {
					return false
				}
				return true
			}
		}
	}
	return false
}

// builtinFlag reports whether a is a flag urfave/cli answers at every
// level without defining it: help and shell completion (--version is the
// app's, and goes before the command like any global flag).
func builtinFlag(a string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	switch name {
	case "help", "h", "generate-bash-completion":
		return true
	}
	return false
}
