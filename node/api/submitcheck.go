package api

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/net/publicsuffix"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/runtime"
	"github.com/palyra-mesh/palyra/runtime/netguard"
)

// Checks of a submission's grants and constraints that refuse, when it is
// submitted, what could only fail (or wait for ever) once it runs.

// hostRule is what an --allow-host entry may be, said in every refusal.
const hostRule = "a host is a DNS name (which covers its subdomains; *.name means the same) or one IP address: no scheme, port, path, CIDR range or other wildcard"

// checkAllowHost refuses an --allow-host entry the runtime's egress
// matcher (runtime/netguard) would refuse, with what is wrong with it and,
// where it can tell, the entry to give instead.
func checkAllowHost(h string) error {
	t := strings.TrimSpace(h)
	refuse := func(what, instead string) error {
		hint := hostRule
		if instead != "" {
			hint = fmt.Sprintf("give --allow-host %s; %s", instead, hostRule)
		}
		return invalid(fmt.Sprintf("--allow-host %q %s", clipHost(h), what), hint)
	}
	if t == "" {
		return invalid("empty host name in --allow-host", "give a host such as example.com; "+hostRule)
	}
	if i := strings.Index(t, "://"); i >= 0 {
		instead := ""
		if u, err := url.Parse(t); err == nil && u.Hostname() != "" {
			instead = u.Hostname()
		}
		return refuse(fmt.Sprintf("has a scheme (%s://); a grant admits http and https to its host", t[:i]), instead)
	}
	if _, err := netip.ParsePrefix(t); err == nil {
		return invalid(fmt.Sprintf("--allow-host %q is an address range (CIDR); a grant names one IP address", clipHost(h)),
			"give one --allow-host per address the job reaches, or a DNS name; "+hostRule)
	}
	if strings.Contains(t, "*") {
		// "*.name" is taken, as the runtime always has (it reads it as
		// name, which admits its subdomains): scripts and policies name it.
		if rest, ok := strings.CutPrefix(t, "*."); !ok || strings.Contains(rest, "*") || rest == "" {
			return refuse("is a wildcard other than *.name", "")
		}
	}
	if host, rest, ok := strings.Cut(t, "/"); ok {
		instead := ""
		if _, err := netguard.NormaliseAllowHost(host); err == nil {
			instead = host
		}
		return refuse(fmt.Sprintf("has a path (/%s)", rest), instead)
	}
	if host, port, err := net.SplitHostPort(t); err == nil {
		instead := ""
		if _, err := netguard.NormaliseAllowHost(host); err == nil {
			instead = host
		}
		return refuse(fmt.Sprintf("has a port (:%s); a grant admits every port of its host", port), instead)
	}
	n, err := netguard.NormaliseAllowHost(t)
	if err != nil {
		return invalid(err.Error(), hostRule)
	}
	if _, ipErr := netip.ParseAddr(n); ipErr != nil {
		// A listed suffix: an ICANN one (com, co.uk), or a private one
		// with a dot (github.io: every user's site). A single label that
		// no list names (localhost, an intranet name) is the fallback
		// rule's answer, not a listed suffix.
		if suffix, icann := publicsuffix.PublicSuffix(n); suffix == n && (icann || strings.Contains(n, ".")) {
			return invalid(fmt.Sprintf("--allow-host %q is a public suffix (like com, co.uk or github.io): it would admit every site under it", clipHost(h)),
				"name the hosts the job reaches, e.g. --allow-host api.example.com")
		}
	}
	return nil
}

// canonicalHosts checks hosts and returns them in the form the runtime
// matches them in (netguard.NormaliseAllowHost: lower case, no final dot,
// no "*.", IPv4-mapped addresses unmapped), each once, in order. The
// policy is asked about these and the job keeps these: a grant spelt
// otherwise (LOCALHOST, localhost., *.localhost, ::ffff:127.0.0.1) was
// checked as written while the runtime matched it as the canonical host,
// so a policy forbidding that host never saw it.
func canonicalHosts(hosts []string) ([]string, error) {
	if len(hosts) == 0 {
		return hosts, nil
	}
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if err := checkAllowHost(h); err != nil {
			return nil, err
		}
		n, err := netguard.NormaliseAllowHost(h)
		if err != nil {
			return nil, invalid(err.Error(), hostRule)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func clipHost(h string) string {
	if len(h) > 128 {
		return h[:128] + "…"
	}
	return h
}

// checkGrantValues refuses a submission's empty or malformed grants
// before they reach the policy (an empty one was a Cedar error about a
// Grant with no ID) or the runtime (a bad host failed the job, blocked),
// and puts its hosts in canonical form (canonicalHosts).
// Skill runs are not checked here: their grants are their manifest's.
func checkGrantValues(m *palyrav1.SubmitJobRequest) error {
	for _, n := range m.SecretNames {
		if n == "" {
			return invalid("empty secret name in --secret", "give the name a secret is stored under ('palyra secret list')")
		}
	}
	hosts, err := canonicalHosts(m.AllowHosts)
	if err != nil {
		return err
	}
	m.AllowHosts = hosts
	return nil
}

// checkConstraints refuses a constraint that no node label can match: a
// job constrained by it would wait for ever.
func checkConstraints(cs map[string]string) error {
	keys := make([]string, 0, len(cs))
	for k := range cs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := cs[k]
		item := k + "=" + v
		if op := palyrav1.ComparisonIn(k, v); op != "" {
			return invalid(fmt.Sprintf("--constraint %q: constraints are equality only (k=v), not %s", item, op),
				"a constraint keeps the job to nodes whose label k is exactly v; to keep it off some nodes, label the others and constrain to that label, or disable the node ('palyra node eligibility ID --disable')")
		}
		if k == "" {
			return invalid(fmt.Sprintf("--constraint %q: the key is empty", item),
				"a constraint k=v matches a node label set with --label k=v on node start")
		}
		if err := palyrav1.CheckText("--constraint", item); err != nil {
			return invalid(err.Error(), "a constraint k=v matches a node label set with --label k=v on node start; labels are printable")
		}
	}
	return nil
}

// watModule refuses WebAssembly text (a .wat file: "(module …)", maybe
// after whitespace and comments) sent as a module: the runtime's "bad
// magic" pointed at building with GOOS=wasip1.
func watModule(module []byte) error {
	if bytes.HasPrefix(module, []byte("\x00asm")) || !looksLikeWAT(module) {
		return nil
	}
	return apiError(connect.CodeInvalidArgument, string(runtime.ReasonInvalidModule),
		"the module is WebAssembly text (.wat), not a binary WebAssembly module",
		"convert it with 'wat2wasm FILE' (from wabt), then pass the .wasm it writes with --wasm")
}

// looksLikeWAT reports whether b starts with "(module", after whitespace,
// ";;" line comments and "(; ;)" block comments.
func looksLikeWAT(b []byte) bool {
	for {
		b = bytes.TrimLeft(b, " \t\r\n\f\v")
		switch {
		case bytes.HasPrefix(b, []byte("\xef\xbb\xbf")): // a UTF-8 byte order mark
			b = b[3:]
		case bytes.HasPrefix(b, []byte(";;")):
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				return false
			}
			b = b[i+1:]
		case bytes.HasPrefix(b, []byte("(;")):
			end := blockCommentEnd(b)
			if end < 0 {
				return false
			}
			b = b[end:]
		default:
			return bytes.HasPrefix(b, []byte("(module"))
		}
	}
}

// blockCommentEnd is the index just past the (possibly nested) block
// comment b starts with, or -1 if it does not end.
func blockCommentEnd(b []byte) int {
	depth := 0
	for i := 0; i+1 < len(b); i++ {
		switch {
		case b[i] == '(' && b[i+1] == ';':
			depth++
			i++
		case b[i] == ';' && b[i+1] == ')':
			depth--
			i++
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
