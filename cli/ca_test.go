package cli

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// waitDevice runs `status` as the device until its stored credential
// satisfies ok, failing after a minute. Every run must succeed.
func waitDevice(t *testing.T, cfg, what string, ok func(*identity.Credential) bool) *identity.Credential {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if r := device(t, cfg, "status"); r.code != 0 {
			t.Fatalf("device call while waiting for %s: %+v", what, r)
		}
		cred, err := identity.LoadCredential(deviceCredDir(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if ok(cred) {
			return cred
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A paired device's certificate renews by itself after a command once it
// is two thirds into its lifetime, and again after 'palyra ca rotate' it
// moves onto the new root; every call succeeds meanwhile.
func TestDeviceRenewsAfterCommands(t *testing.T) {
	c := startNodeWith(t, node.Config{CertTTL: 9 * time.Second})
	cfg := filepath.Join(t.TempDir(), "laptop")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device", "--operator"), "--peer", c.node.Addr()); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	first, err := identity.LoadCredential(deviceCredDir(cfg))
	if err != nil {
		t.Fatal(err)
	}
	renewed := waitDevice(t, cfg, "the device certificate to renew", func(cr *identity.Credential) bool {
		return cr.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0
	})
	if renewed.Principal != first.Principal || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatalf("renewed %s until %s; was %s until %s", renewed.Principal, renewed.Leaf.NotAfter, first.Principal, first.Leaf.NotAfter)
	}

	// Rotate, as this (operator) device.
	r := device(t, cfg, "ca", "rotate", "--overlap", "8s", "--json")
	var rot struct {
		OldRoot   string `json:"old_root"`
		NewRoot   string `json:"new_root"`
		Activated bool   `json:"activated"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rot) != nil || !rot.Activated || rot.NewRoot == rot.OldRoot {
		t.Fatalf("ca rotate: %+v", r)
	}
	onNew := waitDevice(t, cfg, "the device to move onto the new root", func(cr *identity.Credential) bool {
		root := identity.IssuingRoot(cr.Leaf, cr.RootCerts)
		return root != nil && identity.Fingerprint(root.Raw) == rot.NewRoot
	})
	if len(onNew.RootCerts) != 2 {
		t.Fatalf("during the overlap the device trusts %d roots, want both", len(onNew.RootCerts))
	}
	waitDevice(t, cfg, "the device to drop the old root with the cluster", func(cr *identity.Credential) bool {
		return len(cr.RootCerts) == 1 && identity.Fingerprint(cr.RootCerts[0].Raw) == rot.NewRoot
	})

	r = c.cli("ca", "status", "--json")
	var st struct {
		Roots []struct {
			Fingerprint, State string
			Holders            []string
		}
		Nodes []struct {
			ID       string
			Holds    []string
			CertRoot string `json:"cert_root"`
			Expires  string `json:"cert_expires"`
			RenewAt  string `json:"cert_renew_at"`
		}
		Ledger struct {
			Started, Complete bool
			Certificates      int
		} `json:"certificate_ledger"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || len(st.Roots) != 1 || st.Roots[0].State != "active" ||
		st.Roots[0].Fingerprint != rot.NewRoot || len(st.Nodes) != 1 || !strings.HasPrefix(rot.NewRoot, st.Nodes[0].CertRoot) ||
		len(st.Roots[0].Holders) != 1 {
		t.Fatalf("ca status after the rotation: %+v\n%+v", r, st)
	}
	// Every certificate issued (the node's and the device's renewals onto
	// the new root among them) is in the ledger, which a new cluster starts
	// complete.
	if l := st.Ledger; !l.Started || !l.Complete || l.Certificates < 4 {
		t.Fatalf("ca status: certificate ledger %+v, want started, complete, and the node's, its operator's and the device's certificates and renewals", l)
	}
	// The node says when its certificate expires and when it renews it
	// (a 9 s lifetime here, renewed two thirds in).
	exp, err1 := time.Parse(time.RFC3339Nano, st.Nodes[0].Expires)
	renew, err2 := time.Parse(time.RFC3339Nano, st.Nodes[0].RenewAt)
	if err1 != nil || err2 != nil || !renew.Before(exp) || exp.Sub(renew) > 9*time.Second || time.Until(exp) > 10*time.Second || time.Until(exp) < -10*time.Second {
		t.Fatalf("ca status: certificate expires %q, renews %q", st.Nodes[0].Expires, st.Nodes[0].RenewAt)
	}
	if r := c.cli("ca", "status"); r.code != 0 || !strings.Contains(r.stdout, "CERTIFICATE EXPIRES") || !strings.Contains(r.stdout, exp.UTC().Format("2006-01-02")) ||
		!strings.Contains(r.stdout, "nodes accept no others") {
		t.Fatalf("ca status (text) does not show the certificate's expiry: %+v", r)
	}
	if r := c.cli("ca", "rotate", "--overlap", "1s"); r.code != 1 || !strings.Contains(r.stderr, "--overlap between") {
		t.Fatalf("rotate with a too short overlap: %+v", r)
	}
}

// ca status warns of a live node past its renewal time by more than the
// retries take, and of one whose certificate expired, naming what to do;
// not of removed or dead nodes, nor of a node that does not say (older).
func TestCertWarnings(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ms := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	nodes := []*palyrav1.CANode{
		{Id: "current", State: "alive", CertExpiresMs: ms(20 * 24 * time.Hour), CertRenewAtMs: ms(10 * 24 * time.Hour)},
		{Id: "renewing", State: "alive", CertExpiresMs: ms(9 * 24 * time.Hour), CertRenewAtMs: ms(-30 * time.Minute)},
		{Id: "stuck", State: "alive", CertExpiresMs: ms(5 * 24 * time.Hour), CertRenewAtMs: ms(-2 * 24 * time.Hour)},
		{Id: "expired", State: "suspect", CertExpiresMs: ms(-time.Hour), CertRenewAtMs: ms(-10 * 24 * time.Hour)},
		{Id: "gone", State: "removed", CertExpiresMs: ms(-time.Hour), CertRenewAtMs: ms(-10 * 24 * time.Hour)},
		{Id: "old", State: "alive"},
	}
	w := strings.Join(certWarnings(nodes, now), "\n")
	for _, want := range []string{"stuck should have renewed", "palyra doctor", "expired's certificate expired", "palyra node remove expired"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	for _, not := range []string{"current", "renewing", "gone", "old"} {
		if strings.Contains(w, not) {
			t.Errorf("warnings name %s:\n%s", not, w)
		}
	}
	if got := certExpiry(ms(20*24*time.Hour), now); got != "2026-12-17 12:00 (in 20d)" {
		t.Errorf("certExpiry: %q", got)
	}
	if got := certExpiry(ms(-90*time.Minute), now); got != "2026-11-27 10:30 (EXPIRED 1h ago)" {
		t.Errorf("certExpiry of an expired one: %q", got)
	}
	if got := certExpiry(0, now); got != "-" {
		t.Errorf("certExpiry unknown: %q", got)
	}
	// The '-' of a live node is explained; a dead, stopped or removed node's is not.
	nodes = append(nodes, &palyrav1.CANode{Id: "silent-dead", State: "dead"}, &palyrav1.CANode{Id: "silent-stopped", State: "stopped"})
	if got := unannounced(nodes); len(got) != 1 || got[0] != "old" {
		t.Errorf("unannounced: %v, want [old]", got)
	}
}

// A device renews through the node that answered the command, not the
// first address it tried: with that one down the renewal failed ("no
// palyra node answered at …") after the command itself succeeded through
// another node, on every command until the saved address changed.
func TestDeviceRenewsThroughTheNodeThatAnswered(t *testing.T) {
	c := startNodeWith(t, node.Config{CertTTL: 9 * time.Second})
	cfg := filepath.Join(t.TempDir(), "laptop")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr()); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	first, err := identity.LoadCredential(deviceCredDir(cfg))
	if err != nil {
		t.Fatal(err)
	}
	hole, err := net.ListenPacket("udp", "127.0.0.1:0") // a node that is down: nothing answers
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	addrs := hole.LocalAddr().String() + "," + c.node.Addr()
	deadline := time.Now().Add(time.Minute)
	for {
		r := device(t, cfg, "--addr", addrs, "job", "list")
		if r.code != 0 || strings.Contains(r.stderr, "could not renew") {
			t.Fatalf("a command through the second address: %+v; want it to succeed and renew through that node", r)
		}
		cred, err := identity.LoadCredential(deviceCredDir(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if cred.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the device certificate never renewed")
		}
		time.Sleep(300 * time.Millisecond)
	}
}
