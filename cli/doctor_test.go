package cli

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/node"
)

// doctor on the data dir of a node removed from the cluster (it keeps
// running, refused): the node certificate has not expired, but it FAILs
// as revoked, and the data dir's operator credential, refused with it,
// gives the node's fix (move the data dir away, join again with a new
// code), not the one for a revoked device (pair a device, --force).
func TestDoctorOnARemovedNodesDataDir(t *testing.T) {
	c := startNode(t)
	second, _ := c.joinNode()
	third, _ := c.joinNodeWith(true)
	waitCluster(t, []*node.Node{c.node, second, third}, 3)
	if r := c.cli("node", "remove", third.ID(), "--force"); r.code != 0 {
		t.Fatalf("node remove: %+v", r)
	}
	dir := third.Layout().Dir
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, ok := third.Layout().ReadRefusal(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the removed node never found that the cluster refuses it")
		}
	}
	doctor := func(addr string) map[string]check {
		t.Helper()
		r := runCLI(t, "--data-dir", dir, "--addr", addr, "doctor", "--json")
		var out struct{ Checks []check }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
			t.Fatalf("doctor through %s: %v %+v", addr, err, r)
		}
		byName := map[string]check{}
		for _, ch := range out.Checks {
			name, _, _ := strings.Cut(ch.Name, " (")
			byName[name] = ch
		}
		return byName
	}
	// Through the removed node itself, which still answers its operator.
	checks := doctor(third.Addr())
	cert := checks["node certificate"]
	if cert.Status != "fail" || !strings.Contains(cert.Detail, "removed") ||
		!strings.Contains(cert.Fix, "move its data dir away and join again with a new code") || !strings.Contains(cert.Fix, dir) {
		t.Fatalf("node certificate of a removed node: %+v", cert)
	}
	// Through a node of the cluster, which refuses the operator credential
	// revoked with its node.
	checks = doctor(c.node.Addr())
	if cert := checks["node certificate"]; cert.Status != "fail" {
		t.Fatalf("node certificate through the cluster: %+v", cert)
	}
	cred := checks["CLI credential"]
	if cred.Status != "fail" || !strings.Contains(cred.Fix, "join again with a new code") ||
		strings.Contains(cred.Fix, "device pair") || strings.Contains(cred.Fix, "--force") {
		t.Fatalf("the removed node's operator credential should give the node's fix: %+v", cred)
	}
	// 'nodes' through the removed node fails rather than pass its stale
	// view off as the cluster's (a trial: the live nodes listed dead, it
	// alive, exit 0); 'status' warns.
	if r := runCLI(t, "--data-dir", dir, "--addr", third.Addr(), "nodes"); r.code != 1 || !strings.Contains(r.stderr, "was removed from the cluster") || !strings.Contains(r.stderr, "stale view") {
		t.Fatalf("nodes through the removed node: %+v", r)
	}
	if r := runCLI(t, "--data-dir", dir, "--addr", third.Addr(), "status"); !strings.Contains(r.stderr, "warning: the node that answered") {
		t.Fatalf("status through the removed node: %+v", r)
	}
}

// With no node and no credential here, doctor checked nothing of palyra:
// it fails, and a --data-dir that does not exist is named (a mistyped one
// exited 0 on two warnings).
func TestDoctorFailsWithNothingToCheck(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo")
	r := runCLI(t, "--data-dir", missing, "--config-dir", t.TempDir(), "doctor")
	if r.code != exitFailure || !regexp.MustCompile(`FAIL\s+CLI credential`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "--data-dir "+missing+" does not exist") {
		t.Fatalf("doctor on a data dir that does not exist: %+v; want it to fail naming the path", r)
	}
}
