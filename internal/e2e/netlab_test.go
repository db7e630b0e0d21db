package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// netLab is a private network for one test: a bridge and n network
// namespaces, each joined to the bridge by a veth with the address
// 10.77.0.(i+1)/24. The namespaces get no default route, so the only
// addresses reachable from them are the ones the lab assigned. Names carry
// the test process's pid (and a per-process counter), setup refuses names
// that already exist, and t.Cleanup removes everything even when the test
// fails.
type netLab struct {
	t      *testing.T
	bridge string
	ns     []string // namespace names
	addrs  []string // 10.77.0.x, one per namespace
}

// faultTable is the nftables table partition installs and heal deletes.
const faultTable = "palyra_fault"

var labSeq atomic.Int32

// requireNetLab skips the test, loudly, unless it runs as root with ip and
// nft available; with CI=true it fails instead, because CI must run it.
func requireNetLab(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root (ip netns, veth, nft)"
	} else {
		for _, tool := range []string{"ip", "nft"} {
			if _, err := exec.LookPath(tool); err != nil {
				why = fmt.Sprintf("needs %s on PATH (apt-get install -y iproute2 nftables, or make deps)", tool)
			}
		}
	}
	if why == "" {
		return
	}
	msg := fmt.Sprintf("!!! %s NOT RUN: this network-namespace test %s", t.Name(), why)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI must run it")
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
}

// newNetLab creates the bridge and n namespaces (n <= 250).
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	requireNetLab(t)
	sweepStaleLabs(t)
	pid, k := os.Getpid(), labSeq.Add(1)
	l := &netLab{t: t, bridge: fmt.Sprintf("plbr%d-%d", pid, k)}
	for i := range n {
		l.ns = append(l.ns, fmt.Sprintf("palyra-e2e-%d-%d-n%d", pid, k, i+1))
		l.addrs = append(l.addrs, fmt.Sprintf("10.77.0.%d", i+1))
	}
	existing := run(t, "ip", "netns", "list")
	for _, ns := range l.ns {
		if regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ns) + `\b`).MatchString(existing) {
			t.Fatalf("network namespace %s already exists; refusing to touch it", ns)
		}
	}
	if exec.Command("ip", "link", "show", l.bridge).Run() == nil {
		t.Fatalf("link %s already exists; refusing to touch it", l.bridge)
	}
	t.Cleanup(l.remove) // registered first, so it runs after the nodes are killed

	must(t, "ip", "link", "add", l.bridge, "type", "bridge")
	must(t, "ip", "link", "set", l.bridge, "up")
	for i, ns := range l.ns {
		inside, outside := l.veth(i)
		must(t, "ip", "netns", "add", ns)
		must(t, "ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
		must(t, "ip", "link", "set", inside, "netns", ns)
		must(t, "ip", "link", "set", outside, "master", l.bridge)
		must(t, "ip", "link", "set", outside, "up")
		must(t, "ip", "-n", ns, "addr", "add", l.addrs[i]+"/24", "dev", inside)
		must(t, "ip", "-n", ns, "link", "set", inside, "up")
		must(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	return l
}

// veth names the pair of namespace i (inside the namespace, on the bridge).
func (l *netLab) veth(i int) (string, string) {
	base := strings.TrimPrefix(l.bridge, "plbr")
	return fmt.Sprintf("plv%s-%d", base, i+1), fmt.Sprintf("plb%s-%d", base, i+1)
}

// remove deletes the namespaces, veths and bridge; it reports, but does not
// stop at, failures.
func (l *netLab) remove() {
	for i, ns := range l.ns {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			l.t.Errorf("cleanup: ip netns del %s: %v %s", ns, err, out)
		}
		_, outside := l.veth(i)
		exec.Command("ip", "link", "del", outside).Run() // gone with the namespace, normally
	}
	if out, err := exec.Command("ip", "link", "del", l.bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		l.t.Errorf("cleanup: ip link del %s: %v %s", l.bridge, err, out)
	}
}

// partition drops all traffic between namespace i and the addresses of the
// namespaces in peers, in both directions, with an nftables table inside
// namespace i.
func (l *netLab) partition(i int, peers ...int) {
	l.t.Helper()
	var set []string
	for _, p := range peers {
		set = append(set, l.addrs[p])
	}
	addrs := strings.Join(set, ", ")
	rules := fmt.Sprintf(`table inet %s {
	chain in { type filter hook input priority 0; policy accept; ip saddr { %s } drop; }
	chain out { type filter hook output priority 0; policy accept; ip daddr { %s } drop; }
}
`, faultTable, addrs, addrs)
	cmd := exec.Command("ip", "netns", "exec", l.ns[i], "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("nft in %s: %v %s", l.ns[i], err, out)
	}
}

// heal deletes namespace i's fault table.
func (l *netLab) heal(i int) {
	l.t.Helper()
	must(l.t, "ip", "netns", "exec", l.ns[i], "nft", "delete", "table", "inet", faultTable)
}

// sweepStaleLabs removes namespaces and bridges this harness left behind in
// an earlier run whose process no longer exists (a test binary killed by
// its timeout runs no cleanups). It only touches names of this harness's
// form whose pid is dead.
func sweepStaleLabs(t *testing.T) {
	dead := func(pid string) bool {
		n, err := strconv.Atoi(pid)
		if err != nil || n == os.Getpid() {
			return false
		}
		_, err = os.Stat(fmt.Sprintf("/proc/%d", n))
		return os.IsNotExist(err)
	}
	nsRe := regexp.MustCompile(`(?m)^(palyra-e2e-(\d+)-\d+-n\d+)\b`)
	for _, m := range nsRe.FindAllStringSubmatch(run(t, "ip", "netns", "list"), -1) {
		if dead(m[2]) {
			exec.Command("ip", "netns", "del", m[1]).Run()
		}
	}
	out, _ := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	brRe := regexp.MustCompile(`(?m)^\d+: (plbr(\d+)-\d+)[:@]`)
	for _, m := range brRe.FindAllStringSubmatch(string(out), -1) {
		if dead(m[2]) {
			exec.Command("ip", "link", "del", m[1]).Run()
		}
	}
}

// run returns a command's output, failing the test if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func must(t *testing.T, name string, args ...string) { t.Helper(); run(t, name, args...) }
