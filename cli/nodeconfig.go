package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/node"
)

// A node's settings come, in order of precedence, from its command-line
// flags, then PALYRA_* environment variables, then the --config file,
// then the --profile (or the file's profile key), then built-in defaults.
// The file is TOML whose keys are the long names of 'palyra node start''s
// flags (plus data-dir and profile), so the flag reference is also the
// file's.

// profile is a named set of defaults for one way of deploying Palyra.
type profile struct {
	name, about string
	values      map[string]any
	// loopbackOnly refuses to bind or advertise anything but loopback.
	loopbackOnly bool
}

var profiles = []profile{
	{name: "local", about: "one machine, loopback only: a single voter on 127.0.0.1; refuses any other address",
		values: map[string]any{"listen": "127.0.0.1:7444", "target-voters": 1, "network": "lan"}, loopbackOnly: true},
	{name: "single-vm", about: "one server that devices reach over the network: a single voter on every interface, wan timers",
		values: map[string]any{"listen": "0.0.0.0:7444", "target-voters": 1, "network": "wan"}},
	{name: "worker-enabled", about: "a node of a cluster of several machines that all run work: three voters, every interface, lan timers",
		values: map[string]any{"listen": "0.0.0.0:7444", "target-voters": 3, "network": "lan"}},
}

func profileNamed(name string) (profile, error) {
	var names []string
	for _, p := range profiles {
		if p.name == name {
			return p, nil
		}
		names = append(names, p.name)
	}
	return profile{}, fmt.Errorf("unknown profile %q; profiles are %s", name, strings.Join(names, ", "))
}

func profileHelp() string {
	var b strings.Builder
	for _, p := range profiles {
		var kv []string
		for k, v := range p.values {
			kv = append(kv, fmt.Sprintf("%s=%v", k, v))
		}
		sort.Strings(kv)
		fmt.Fprintf(&b, "     %-15s %s (%s)\n", p.name, p.about, strings.Join(kv, " "))
	}
	return b.String()
}

// configFlags are the flags that pick where settings come from.
func configFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "config", Usage: "read settings from the TOML `FILE` (keys: these flags' names, plus data-dir and profile); flags and PALYRA_* variables override it", EnvVars: []string{"PALYRA_CONFIG"}},
		&ucli.StringFlag{Name: "profile", Usage: "defaults for a deployment: local, single-vm or worker-enabled (see DESCRIPTION)", EnvVars: []string{"PALYRA_PROFILE"}},
		&ucli.BoolFlag{Name: "print-config", Usage: "print the effective settings, each with where it came from, and exit"},
	}
}

// setting is one effective value and where it came from.
type setting struct {
	value  string
	source string // flag, env, config, profile or default
}

// applyNodeSettings fills the flags the command line and environment left
// unset from the config file and the profile, then checks the profile's
// rules. It returns where each setting came from.
func applyNodeSettings(c *ucli.Context) (map[string]setting, error) {
	fileVals := map[string]any{}
	path := c.String("config")
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, usageErr("--config: %v", err)
		}
		if _, err := toml.Decode(string(data), &fileVals); err != nil {
			return nil, usageErr("--config %s: %v", path, err)
		}
	}
	known := map[string]ucli.Flag{}
	for _, f := range c.Command.Flags {
		known[f.Names()[0]] = f
	}
	for _, skip := range []string{"config", "print-config", "code", "peer", "help"} {
		delete(known, skip)
	}
	var keys []string
	for k := range fileVals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := known[k]; !ok && k != "data-dir" {
			hint := ""
			if s := closest(k, flagNames(known)); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
			}
			return nil, usageErr("--config %s: unknown key %q%s; the keys are the long names of 'palyra node start --help''s flags, plus data-dir", path, k, hint)
		}
	}
	pname := c.String("profile")
	pfrom := sourceOf(c, "profile")
	if pname == "" {
		if v, ok := fileVals["profile"]; ok {
			s, ok := v.(string)
			if !ok {
				return nil, usageErr("--config %s: profile must be a string", path)
			}
			pname, pfrom = s, "config"
		}
	}
	var prof profile
	if pname != "" {
		p, err := profileNamed(pname)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		prof = p
	}
	src := map[string]setting{}
	if pname != "" {
		src["profile"] = setting{pname, pfrom}
	}
	set := func(ctx *ucli.Context, name string, v any, from string) error {
		var vals []string
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				vals = append(vals, fmt.Sprint(e))
			}
		case map[string]any:
			return fmt.Errorf("%s: a table is not a value; write %s = VALUE", name, name)
		default:
			vals = []string{fmt.Sprint(x)}
		}
		for _, s := range vals {
			if err := ctx.Set(name, s); err != nil {
				return fmt.Errorf("%s = %v: %v", name, v, err)
			}
		}
		src[name] = setting{strings.Join(vals, ","), from}
		return nil
	}
	// data-dir is the app's flag; the rest are this command's.
	for name := range known {
		if name == "profile" {
			continue
		}
		if s := sourceOf(c, name); s != "" {
			src[name] = setting{flagValue(c, name), s}
			continue
		}
		if v, ok := fileVals[name]; ok {
			if err := set(c, name, v, "config"); err != nil {
				return nil, usageErr("--config %s: %v", path, err)
			}
			continue
		}
		if v, ok := prof.values[name]; ok {
			if err := set(c, name, v, "profile "+prof.name); err != nil {
				return nil, err
			}
			continue
		}
		src[name] = setting{flagValue(c, name), "default"}
	}
	// c.Set and c.IsSet find the app's data-dir flag through c's lineage.
	if s := sourceOf(c, "data-dir"); s != "" {
		src["data-dir"] = setting{c.String("data-dir"), s}
	} else if v, ok := fileVals["data-dir"]; ok {
		if err := set(c, "data-dir", v, "config"); err != nil {
			return nil, usageErr("--config %s: %v", path, err)
		}
	} else {
		src["data-dir"] = setting{c.String("data-dir"), "default"}
	}
	if prof.loopbackOnly {
		for _, name := range []string{"listen", "advertise"} {
			if v := c.String(name); v != "" && !isLoopback(v) {
				return nil, usageErr("--%s %s: profile %s binds loopback only; use 127.0.0.1:PORT, or another profile (single-vm, worker-enabled)", name, v, prof.name)
			}
		}
	}
	return src, nil
}

// sourceOf says whether name was set on the command line ("flag") or by
// its environment variable ("env"); "" when neither. A flag that equals
// its variable's value counts as the variable's.
func sourceOf(c *ucli.Context, name string) string {
	if !c.IsSet(name) {
		return ""
	}
	envs := map[string][]string{"data-dir": {"PALYRA_DATA_DIR"}}
	for _, f := range c.Command.Flags {
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok && f.Names()[0] == name {
			envs[name] = ev.GetEnvVars()
		}
	}
	for _, e := range envs[name] {
		if v, set := os.LookupEnv(e); set && v == flagValue(c, name) {
			return "env"
		}
	}
	return "flag"
}

func flagValue(c *ucli.Context, name string) string {
	v := c.Value(name)
	switch x := v.(type) {
	case ucli.StringSlice:
		return strings.Join(x.Value(), ",")
	case *ucli.StringSlice:
		return strings.Join(x.Value(), ",")
	case time.Duration:
		if x == 0 {
			return ""
		}
		return x.String()
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func flagNames(m map[string]ucli.Flag) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return append(out, "data-dir")
}

// closest is the candidate nearest to s by edit distance, if near enough.
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of two neighbours each cost one, so
// "jbo" is one from "job" (Levenshtein counts two).
func editDistance(a, b string) int {
	rows := make([][]int, len(a)+1)
	for i := range rows {
		rows[i] = make([]int, len(b)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			rows[i][j] = min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				rows[i][j] = min(rows[i][j], rows[i-2][j-2]+1)
			}
		}
	}
	return rows[len(a)][len(b)]
}

func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// printConfig writes the effective settings as TOML that --config reads
// back, each with its source as a comment.
func printConfig(w io.Writer, src map[string]setting, c *ucli.Context) error {
	var names []string
	for k := range src {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "# effective settings of 'palyra node start' (flag > env > config > profile > default)")
	for _, k := range names {
		s := src[k]
		line, err := tomlLine(c, k, s.value)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%-40s # %s\n", line, s.source)
	}
	return nil
}

func tomlLine(c *ucli.Context, name, value string) (string, error) {
	var f ucli.Flag
	for _, fl := range c.Command.Flags {
		if fl.Names()[0] == name {
			f = fl
		}
	}
	switch f.(type) {
	case *ucli.IntFlag, *ucli.BoolFlag:
		if value == "" {
			value = "0"
		}
		return fmt.Sprintf("%s = %s", name, value), nil
	case *ucli.StringSliceFlag:
		var q []string
		for _, v := range strings.Split(value, ",") {
			if v != "" {
				q = append(q, fmt.Sprintf("%q", v))
			}
		}
		return fmt.Sprintf("%s = [%s]", name, strings.Join(q, ", ")), nil
	}
	if value == "" {
		return "# " + name + " = \"\"", nil
	}
	return fmt.Sprintf("%s = %q", name, value), nil
}

// resolveDefaults replaces the settings left to the node (those whose
// source is "default") with what the node would use, as it decides them
// at start: the address, network and metrics address recorded in the data dir, 2 × CPUs
// wasm slots, 2 browser slots, 3 target voters, the 24h certificate
// lifetime. It reads the data dir and writes nothing.
func resolveDefaults(src map[string]setting, cfg node.Config) error {
	res, _, err := node.Resolve(cfg)
	if err != nil {
		return err
	}
	st, _ := node.Layout{Dir: cfg.DataDir}.ReadState()
	fill := func(name, value, source string) {
		if s, ok := src[name]; ok && s.source == "default" {
			src[name] = setting{value, source}
		}
	}
	recorded := "recorded in the data dir at the last start"
	if st.Listen != "" || st.Address != "" {
		fill("listen", res.Listen, recorded)
	} else {
		fill("listen", res.Listen, "default")
	}
	switch {
	case st.Advertise != "" && res.Advertise == st.Advertise:
		fill("advertise", res.Advertise, recorded)
	case res.Advertise != "":
		fill("advertise", res.Advertise, "default: this machine's primary address, for a wildcard listen")
	default:
		fill("advertise", "", "default: the listen address")
	}
	if st.Network != "" {
		fill("network", res.Network, recorded)
	} else {
		fill("network", res.Network, "default")
	}
	if st.MetricsListen != "" {
		fill("metrics-listen", res.MetricsListen, recorded+" ('off' forgets it)")
		if st.MetricsAllowRemote {
			fill("metrics-allow-remote", "true", recorded)
		}
	} else {
		fill("metrics-listen", "", "default: none")
	}
	fill("wasm-slots", strconv.Itoa(res.WasmSlots), "default: 2 × CPUs")
	if res.BrowserSlots > 0 {
		source := "default"
		if _, ok := node.FindBrowser(); !ok {
			source = "default; no Chromium found here, so none until one is installed"
		}
		fill("browser-slots", strconv.Itoa(res.BrowserSlots), source)
	}
	fill("target-voters", strconv.Itoa(res.TargetVoters), "default")
	fill("cert-ttl", res.CertTTL.String(), "default")
	return nil
}
