package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// check is one doctor finding.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn, fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func doctorCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "doctor",
		Usage: "check this machine's palyra setup and say how to fix what is wrong",
		Flags: []ucli.Flag{jsonFlag, &ucli.BoolFlag{Name: "strict", Usage: "exit non-zero on warnings too"}},
		Action: func(c *ucli.Context) error {
			var checks []check
			layout := node.Layout{Dir: c.String("data-dir")}
			// self is this data dir's node ("" without one), and removed
			// whether it found the cluster refusing its certificate.
			var self string
			removed := false
			if _, err := os.Stat(layout.StateFile()); err == nil {
				if st, err := layout.ReadState(); err == nil {
					self = st.NodeID
				}
				checks = append(checks, localNodeCheck(layout))
				checks = append(checks, dataDirChecks(layout)...)
				checks = append(checks, diskCheck(layout.Dir))
				nc := certCheck("node certificate", layout.NodeCredDir())
				if r, ok := layout.ReadRefusal(); ok && nc.Status != "fail" {
					nc, removed = removedNodeCheck(nc, layout, r), true
				}
				checks = append(checks, nc)
			}
			if src, err := resolveCredential(c); err == nil {
				cred := certCheck("CLI credential ("+src.desc+")", src.dir)
				reach, refused, status := reachCheck(c)
				if refused != nil {
					// The node answered and refused the credential: that
					// is the credential's state, whatever its file says.
					reach.Fix = "the credential was refused (see 'CLI credential' above)"
					if cred.Status != "fail" {
						cred = refusedCheck(cred, src, removed)
					}
					checks = append(checks, cred, reach)
				} else {
					if removed {
						self = "" // its membership is moot, and the answer may be its own stale view
					}
					checks = append(append(checks, cred, reach, capacityCheck(c)), raftCheck(c, self, layout.Dir)...)
					if status != nil {
						checks = append(checks, leaderChurnCheck(status))
					}
				}
			} else {
				// With neither a node nor a credential here, nothing of
				// palyra was checked: that is no pass (a mistyped
				// --data-dir exited 0 on two warnings).
				status := "warn"
				if self == "" {
					status = "fail"
				}
				checks = append(checks, check{Name: "CLI credential", Status: status, Detail: err.Error(),
					Fix: "pass --data-dir on a node's machine, or pair: palyra device pair --code CODE --peer HOST:PORT"})
				if _, serr := os.Stat(layout.Dir); c.IsSet("data-dir") && errors.Is(serr, fs.ErrNotExist) {
					checks = append(checks, check{Name: "data dir", Status: "fail", Detail: fmt.Sprintf("--data-dir %s does not exist", layout.Dir),
						Fix: "check the path: a node's data dir holds node.json (palyra node start --data-dir DIR made it)"})
				}
			}
			checks = append(checks, clockCheck(), udpBufferCheck())
			worst := 0
			for _, ch := range checks {
				worst = max(worst, map[string]int{"ok": 0, "warn": 1, "fail": 2}[ch.Status])
			}
			if c.Bool("json") {
				if err := writeJSON(c.App.Writer, map[string]any{"checks": checks}); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
				for _, ch := range checks {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(ch.Status), ch.Name, ch.Detail)
					if ch.Fix != "" && ch.Status != "ok" {
						fmt.Fprintf(tw, "\t\tfix: %s\n", ch.Fix)
					}
				}
				tw.Flush()
			}
			if worst == 2 || (worst == 1 && c.Bool("strict")) {
				return ucli.Exit("", exitFailure)
			}
			return nil
		},
	}
}

// localNodeCheck says whether this data dir's node runs: 'node reachable'
// may be answered by another node of the cluster, which says nothing
// about this one.
func localNodeCheck(l node.Layout) check {
	st, err := l.ReadState()
	if err != nil {
		return check{Name: "this machine's node", Status: "fail", Detail: fmt.Sprintf("%s: %v", l.StateFile(), err)}
	}
	if !l.Running() {
		return check{Name: "this machine's node", Status: "fail",
			Detail: fmt.Sprintf("%s (%s) is not running on %s", st.NodeID, st.Address, l.Dir),
			Fix:    "start it: palyra node start --data-dir " + l.Dir}
	}
	return check{Name: "this machine's node", Status: "ok", Detail: fmt.Sprintf("%s runs on %s", st.NodeID, l.Dir)}
}

func dataDirChecks(l node.Layout) []check {
	var out []check
	fi, err := os.Stat(l.Dir)
	if err != nil {
		return []check{{Name: "data dir", Status: "fail", Detail: err.Error()}}
	}
	if fi.Mode().Perm()&0o077 != 0 {
		out = append(out, check{Name: "data dir permissions", Status: "fail",
			Detail: fmt.Sprintf("%s is %v: other users can read cluster secrets", l.Dir, fi.Mode().Perm()),
			Fix:    "chmod 700 " + l.Dir})
	} else {
		out = append(out, check{Name: "data dir permissions", Status: "ok", Detail: fmt.Sprintf("%s is %v", l.Dir, fi.Mode().Perm())})
	}
	keys, _ := filepath.Glob(filepath.Join(l.Dir, "*", "*.key"))
	more, _ := filepath.Glob(filepath.Join(l.Dir, "*", "key.pem"))
	for _, k := range append(keys, more...) {
		if fi, err := os.Stat(k); err == nil && fi.Mode().Perm()&0o077 != 0 {
			out = append(out, check{Name: "key permissions", Status: "fail", Detail: fmt.Sprintf("%s is %v", k, fi.Mode().Perm()), Fix: "chmod 600 " + k})
		}
	}
	return out
}

func certCheck(name, dir string) check {
	cred, err := identity.LoadCredential(dir)
	if err != nil {
		return check{Name: name, Status: "fail", Detail: err.Error(), Fix: "pair again with a new code ('palyra pair create' on an operator machine)"}
	}
	left := time.Until(cred.Leaf.NotAfter)
	detail := fmt.Sprintf("%s expires %s (in %s)", cred.Principal, cred.Leaf.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Minute))
	switch {
	case left <= 0:
		return check{Name: name, Status: "fail", Detail: detail, Fix: "the certificate expired and can no longer be renewed: pair again with a new code ('palyra pair create' on an operator machine)"}
	case time.Now().After(identity.RenewAt(cred.Leaf)):
		return check{Name: name, Status: "warn", Detail: detail + "; renewal is overdue", Fix: "nodes renew themselves, and a paired device after any palyra command; check that the cluster has a leader ('palyra status')"}
	}
	return check{Name: name, Status: "ok", Detail: detail}
}

// reachCheck calls the node; refused is the node's refusal of this
// credential (nil for any other outcome).
func reachCheck(c *ucli.Context) (ch check, refused *client.Error, status *palyrav1.StatusResponse) {
	cl, err := dial(c)
	if err != nil {
		return check{Name: "node reachable", Status: "fail", Detail: err.Error()}, nil, nil
	}
	defer cl.Close()
	t0 := time.Now()
	resp, err := cl.Node.Status(c.Context, connect.NewRequest(&palyrav1.StatusRequest{}))
	if err != nil {
		e := cl.Explain(err)
		if credentialRefused(e) {
			refused = e
		}
		return check{Name: "node reachable", Status: "fail", Detail: e.Message, Fix: e.Hint}, refused, nil
	}
	leader := "leader " + resp.Msg.LeaderId
	if resp.Msg.LeaderId == "" {
		leader = "no leader known"
	}
	return check{Name: "node reachable", Status: "ok", Detail: fmt.Sprintf("%s at %s answered in %s (raft %s, %s)",
		resp.Msg.NodeId, cl.Reached(), time.Since(t0).Round(time.Millisecond), resp.Msg.RaftState, leader)}, nil, resp.Msg
}

// churnLimit is how many leader changes in an hour, as one node saw them,
// doctor takes for churn: a start, a rolling restart (each leader hands
// over once) and a lost node fit under it.
const churnLimit = 5

// leaderChurnCheck warns when the node that answered saw the leader
// change more than churnLimit times in the last hour: with no node lost,
// that is machines too busy to answer raft's heartbeats in time (the LAN
// timers give a leader 300 ms) or a lossy network.
func leaderChurnCheck(s *palyrav1.StatusResponse) check {
	const name = "leader stability"
	if s.LeaderId == "" && s.LeaderSinceMs == 0 && s.NodeId != "" && s.LeaderChangesLastHour > 0 {
		// A trial: rated OK during a quorum loss, "the node does not say".
		return check{Name: name, Status: "warn", Detail: fmt.Sprintf("no leader now (%s saw %d leader change(s) %s)", s.NodeId, s.LeaderChangesLastHour, changesWindow(s)),
			Fix: "see 'failure tolerance': a majority of voters must be up and reach each other to elect one"}
	}
	if s.LeaderSinceMs == 0 && s.LeaderChangesLastHour == 0 {
		return check{Name: name, Status: "ok", Detail: "the node does not say (it runs an older palyra, or knows no leader)"}
	}
	detail := fmt.Sprintf("%s saw %d leader change(s) %s", s.NodeId, s.LeaderChangesLastHour, changesWindow(s))
	if int(s.LeaderChangesLastHour) <= churnLimit {
		return check{Name: name, Status: "ok", Detail: detail}
	}
	return check{Name: name, Status: "warn", Detail: detail + ": elections with no node lost",
		Fix: "the nodes' machines are starved of CPU or their network drops packets: check load and links ('palyra status' on each node); " +
			"nodes on busy machines or on several sites should run with '--network wan' (longer failure-detection timers)"}
}

// credentialRefused reports whether a node turned this credential away:
// in the TLS handshake (a revoked principal or certificate) or, on a
// connection made before the revocation, as an API error.
func credentialRefused(e *client.Error) bool {
	return e.Code == "unauthenticated" &&
		(strings.Contains(e.Message, "refused this credential") || strings.Contains(e.Message, "revoked"))
}

// refusedCheck is the credential's check when a node refused it although
// it has not expired (certCheck): the cluster revoked it, and only pairing
// again with a new code gives this machine a working credential. When it
// is the operator credential of a data dir whose node was removed
// (nodeRemoved), it went with the node, and the fix is the node's own.
func refusedCheck(cred check, src credentialSource, nodeRemoved bool) check {
	detail := cred.Detail + "; but the node refused it and it has not expired: it was revoked"
	fix := "pair this device again with a new code (on an operator machine: palyra pair create --kind device): " +
		"palyra device pair --code CODE --peer HOST:PORT --force"
	switch {
	case !src.device && nodeRemoved:
		detail += " with this data dir's node ('palyra node remove' revokes a node's local operator too)"
		fix = "see 'node certificate' above: " + node.RemovedFix
	case !src.device:
		fix = "this data dir's operator credential cannot be renewed once revoked: operate from a paired device " +
			"(palyra pair create --kind device on an operator machine, then here: palyra device pair --code CODE --peer HOST:PORT --force, " +
			"and run commands without --data-dir)"
	}
	return check{Name: cred.Name, Status: "fail", Detail: detail, Fix: fix}
}

// removedNodeCheck is the node certificate's check when the node found
// the cluster refusing it (refused.json): the certificate has not expired,
// but it was revoked with the node, and no renewal or restart brings it
// back.
func removedNodeCheck(cert check, l node.Layout, r node.Refusal) check {
	if r.Because == node.WhyStaleTrust {
		return check{Name: cert.Name, Status: "fail",
			Detail: fmt.Sprintf("%s; but this node trusts none of its peers (found at %s): the cluster replaced its CA root while it was down ('palyra ca rotate') and dropped the old one, or every peer it reaches joined while it was down (its certificate ledger cannot vouch for them without a leader), or its peers are another cluster's",
				cert.Detail, r.Since.UTC().Format(time.RFC3339)),
			Fix: node.RemovedFix + "; its data dir is " + l.Dir}
	}
	return check{Name: cert.Name, Status: "fail",
		Detail: fmt.Sprintf("%s; but the cluster refuses it: this node was removed ('palyra node remove'; the node found so at %s: %s)",
			cert.Detail, r.Since.UTC().Format(time.RFC3339), r.Because),
		Fix: node.RemovedFix + "; its data dir is " + l.Dir}
}

// clockCheck asks the kernel whether the clock is NTP-synchronised:
// certificates and pairing codes expire by the clock.
func clockCheck() check {
	var tx syscall.Timex
	state, err := syscall.Adjtimex(&tx)
	if err != nil {
		return check{Name: "clock", Status: "warn", Detail: "cannot read clock sync state: " + err.Error()}
	}
	const timeError = 5                            // TIME_ERROR: clock not synchronised
	if state == timeError || tx.Status&0x40 != 0 { // STA_UNSYNC
		return check{Name: "clock", Status: "warn", Detail: "the system clock is not synchronised (NTP)",
			Fix: "enable time sync (e.g. systemd-timesyncd or chrony); certificates and codes expire by the clock"}
	}
	return check{Name: "clock", Status: "ok", Detail: fmt.Sprintf("synchronised, estimated error %dµs", tx.Esterror)}
}

// udpBufferCheck: quic-go wants ~7 MiB socket buffers for full throughput.
func udpBufferCheck() check {
	const want = 7 << 20
	var low []string
	for _, f := range []string{"rmem_max", "wmem_max"} {
		b, err := os.ReadFile("/proc/sys/net/core/" + f)
		if err != nil {
			continue
		}
		v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if v < want {
			low = append(low, fmt.Sprintf("%s=%d", f, v))
		}
	}
	if len(low) > 0 {
		return check{Name: "UDP buffers", Status: "warn", Detail: "below the 7 MiB QUIC wants: " + strings.Join(low, ", "),
			Fix: "sysctl -w net.core.rmem_max=7500000 net.core.wmem_max=7500000 (persist in /etc/sysctl.d/)"}
	}
	return check{Name: "UDP buffers", Status: "ok", Detail: "rmem_max and wmem_max are at least 7 MiB"}
}

// capacityCheck says which kinds of job the cluster can run: a cluster
// whose workers found no Chromium runs no browser jobs.
func capacityCheck(c *ucli.Context) check {
	const name = "cluster capacity"
	cl, err := dial(c)
	if err != nil {
		return check{Name: name, Status: "fail", Detail: err.Error()}
	}
	defer cl.Close()
	resp, err := cl.Node.ListNodes(c.Context, connect.NewRequest(&palyrav1.ListNodesRequest{}))
	if err != nil {
		e := cl.Explain(err)
		return check{Name: name, Status: "warn", Detail: "cannot list the nodes: " + e.Message, Fix: e.Hint}
	}
	slots := map[string]int{}
	alive := 0
	for _, n := range resp.Msg.Nodes {
		if n.State != "alive" {
			continue
		}
		alive++
		for kind, k := range n.Capacity {
			slots[kind] += int(k)
		}
	}
	noun := "nodes"
	if alive == 1 {
		noun = "node"
	}
	detail := fmt.Sprintf("%d alive %s: %d wasm slots, %d browser slots", alive, noun, slots["wasm"], slots["browser"])
	if slots["browser"] == 0 {
		return check{Name: name, Status: "warn", Detail: detail + "; no node runs browser jobs",
			Fix: "install Chromium on a worker (Debian: apt-get install -y chromium-headless-shell); running nodes find it within 10s"}
	}
	return check{Name: name, Status: "ok", Detail: detail}
}

// raftCheck says whether every live raft server keeps up with the
// leader's log (the RAFT column of 'palyra nodes'), whether this data
// dir's node (self, "" without one) is a raft server, and how many more
// voters the cluster can lose.
func raftCheck(c *ucli.Context, self, dataDir string) []check {
	cl, err := dial(c)
	if err != nil {
		return []check{{Name: "raft replication", Status: "fail", Detail: err.Error()}}
	}
	defer cl.Close()
	resp, err := cl.Node.ListNodes(c.Context, connect.NewRequest(&palyrav1.ListNodesRequest{RaftProgress: true}))
	if err != nil {
		e := cl.Explain(err)
		return []check{{Name: "raft replication", Status: "warn", Detail: "cannot list the nodes: " + e.Message, Fix: e.Hint}}
	}
	checks := []check{raftCheckFrom(resp.Msg.Nodes)}
	if m, ok := membershipCheckFrom(self, dataDir, resp.Msg.Nodes); ok {
		checks = append(checks, m)
	}
	return append(checks, quorumCheckFrom(resp.Msg))
}

// membershipCheckFrom says whether this machine's node (self) is a raft
// server. One that runs but is not (it left with 'palyra node leave', was
// started again and did not rejoin) answers calls and gossips as alive,
// yet holds no vote and no replica the cluster counts: every other check
// can pass while it stays outside. ok is false when the list does not
// name self (no node here, or gossip does not know it).
func membershipCheckFrom(self, dataDir string, nodes []*palyrav1.NodeInfo) (ch check, ok bool) {
	const name = "raft membership"
	for _, n := range nodes {
		if self == "" || n.Id != self {
			continue
		}
		switch {
		case n.InRaft && n.Voter:
			return check{Name: name, Status: "ok", Detail: fmt.Sprintf("this machine's node %s is a raft voter", self)}, true
		case n.InRaft:
			return check{Name: name, Status: "ok", Detail: fmt.Sprintf("this machine's node %s is a raft non-voter (a spare, promoted when the cluster needs a voter)", self)}, true
		case n.State != "alive":
			return check{}, false // removed, stopped, dead or left: the checks above say so
		}
		return check{Name: name, Status: "fail",
			Detail: fmt.Sprintf("this machine's node %s runs but is not a raft member (in_raft false in 'palyra nodes'): it left the cluster ('palyra node leave') and did not rejoin, so it votes in nothing and holds no replica the cluster counts", self),
			Fix: fmt.Sprintf("restart it to rejoin (stop it, then 'palyra node start --data-dir %s': a node that left rejoins through the servers it knew); "+
				"if it stays out, look at its log for the join error, or stop it, move %s away and join again with a new code ('palyra node join --code CODE --peer HOST:PORT')", dataDir, dataDir)}, true
	}
	return check{}, false
}

// quorumCheckFrom warns when the cluster can lose no more voters (one
// more failure stops every write), as 'palyra status' says it, and fails
// without a quorum. One voter is fine when the cluster's target is one.
func quorumCheckFrom(list *palyrav1.ListNodesResponse) check {
	const name = "failure tolerance"
	h := votersHealth(list.Nodes, int(list.TargetVoters))
	fix := "bring the voters that are down back ('palyra node start' on their machines), or replace them: 'palyra node remove ID', then join a new node"
	if len(h.down) == 0 && h.belowTarget() != "" {
		// Fewer voters than the cluster keeps, none of them down (a node
		// left): only a new node gives back the voter it lacks.
		fix = "add a node: 'palyra pair create --kind node' on an operator machine, then on the new machine 'palyra node join --code CODE --peer HOST:PORT'; it is promoted to voter once stable"
	}
	switch t := h.tolerance(); {
	case h.total <= 1 && h.belowTarget() != "":
		// One voter where the cluster keeps more (after 'node recover',
		// or a first node never joined by others): below its own target.
		return check{Name: name, Status: "warn", Detail: fmt.Sprintf("voters: %s (a single voter: add nodes to survive losing one)", h), Fix: fix}
	case h.total <= 1:
		return check{Name: name, Status: "ok", Detail: fmt.Sprintf("voters: %s (a single voter, as --target-voters 1 asks)", h)}
	case t < 0 && h.noLeader && len(h.down) == 0:
		// Every voter alive and none leads: an election that does not
		// end, not voters to bring back.
		return check{Name: name, Status: "fail", Detail: "voters: " + h.String(),
			Fix: "read the voters' logs for why no election ends (a full disk, clocks, a network that drops raft's traffic); 'palyra nodes' shows each one's raft state"}
	case t < 0:
		// Without a quorum nothing can be removed or paired: bring voters
		// back, or, if they are lost for good, recover from a survivor.
		return check{Name: name, Status: "fail", Detail: "voters: " + h.String(),
			Fix: "bring the voters that are down back ('palyra node start' on their machines); if a majority is lost for good, stop one survivor and run 'palyra node recover --data-dir DIR --dry-run' on it (README: Outage recovery)"}
	case t == 0:
		return check{Name: name, Status: "warn", Detail: "voters: " + h.String(), Fix: fix}
	}
	return check{Name: name, Status: "ok", Detail: "voters: " + h.String()}
}

// raftCheckFrom is raftCheck's verdict on a node list.
func raftCheckFrom(nodes []*palyrav1.NodeInfo) check {
	const name = "raft replication"
	if !hasLeader(nodes) {
		// Every server has lost the leader: none is behind one. The
		// failure tolerance check says why (no quorum, or an election).
		return check{Name: name, Status: "warn", Detail: "no leader, so no log to keep up with: see 'failure tolerance'",
			Fix: "bring back enough voters for a quorum; 'palyra status' names those that are down"}
	}
	var bad []string
	servers := 0
	for _, n := range nodes {
		if !n.InRaft || n.State != "alive" {
			continue
		}
		servers++
		switch {
		case !n.RaftKnown:
			bad = append(bad, n.Id+": no answer")
		case n.RaftLagging:
			bad = append(bad, n.Id+": "+strings.TrimPrefix(raftText(n), "LAGGING: "))
		}
	}
	if len(bad) > 0 {
		return check{Name: name, Status: "warn", Detail: "lagging behind the leader's log: " + strings.Join(bad, "; "),
			Fix: "look at those nodes' logs (a full disk shows as 'no space left on device') and 'palyra nodes'; a lagging node gets no new work"}
	}
	return check{Name: name, Status: "ok", Detail: fmt.Sprintf("%d live raft server(s), all keeping up with the leader's log", servers)}
}

// diskCheck warns when the data dir's filesystem runs low: raft, the
// snapshots and the blobs all live there.
func diskCheck(dir string) check {
	const name = "disk"
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return check{Name: name, Status: "warn", Detail: "cannot read free space: " + err.Error()}
	}
	free := st.Bavail * uint64(st.Bsize)
	total := st.Blocks * uint64(st.Bsize)
	detail := fmt.Sprintf("%s free of %s on %s's filesystem", sizeText(free), sizeText(total), dir)
	switch {
	case free < 256<<20:
		return check{Name: name, Status: "fail", Detail: detail, Fix: "free space on that filesystem: below 256 MiB raft and blob writes start failing"}
	case free < 2<<30 || free < total/20:
		return check{Name: name, Status: "warn", Detail: detail, Fix: "free space on that filesystem, or prune old jobs sooner ('palyra job prune --older-than 1h')"}
	}
	return check{Name: name, Status: "ok", Detail: detail}
}
