package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// pairCode creates a pairing code through the CLI.
func (c *cluster) pairCode(kind string, extra ...string) string {
	c.t.Helper()
	r := c.cli(append([]string{"pair", "create", "--kind", kind, "--json"}, extra...)...)
	var out struct{ Code string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || out.Code == "" {
		c.t.Fatalf("pair create: %v %+v", err, r)
	}
	return out.Code
}

// device runs the CLI as a paired device: its own config dir, no data dir.
func device(t *testing.T, cfgDir string, args ...string) result {
	t.Helper()
	t.Setenv("PALYRA_DATA_DIR", "")
	wd, _ := os.Getwd()
	os.Chdir(t.TempDir()) // no ./palyra-data here
	defer os.Chdir(wd)
	return runCLI(t, append([]string{"--config-dir", cfgDir}, args...)...)
}

func TestDevicePairingUseAndRevoke(t *testing.T) {
	c := startNode(t)
	code := c.pairCode("device")
	cfg := filepath.Join(t.TempDir(), "laptop")

	r := device(t, cfg, "device", "pair", "--code", code, "--peer", c.node.Addr(), "--name", "laptop")
	if r.code != 0 || !strings.Contains(r.stdout, "paired as device:") {
		t.Fatalf("device pair: %+v", r)
	}
	key, err := os.Stat(filepath.Join(cfg, "credential", "key.pem"))
	if err != nil || key.Mode().Perm() != 0o600 {
		t.Fatalf("device key: %v %v", key, err)
	}
	// The device works with no data dir: submits and reads its job.
	r = device(t, cfg, "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "dev", "--wait")
	if r.code != 0 || r.stdout != "ved" {
		t.Fatalf("device submit: %+v", r)
	}
	// A plain (non-operator) device may not administer.
	if r := device(t, cfg, "pair", "create"); r.code != 1 || !strings.Contains(r.stderr, "forbidden") && !strings.Contains(r.stderr, "no policy permits") {
		t.Fatalf("plain device created a pairing code: %+v", r)
	}
	// The code was consumed: a second use fails and changes nothing.
	before := c.cli("device", "list", "--json").stdout
	r = device(t, filepath.Join(t.TempDir(), "other"), "device", "pair", "--code", code, "--peer", c.node.Addr())
	if r.code != 1 || !strings.Contains(r.stderr, "already used") {
		t.Fatalf("reused code: %+v", r)
	}
	if after := c.cli("device", "list", "--json").stdout; after != before {
		t.Fatalf("reused code changed the device list:\n%s\n%s", before, after)
	}
	// Garbled code: a clear local error.
	garbled := []byte(c.pairCode("device"))
	garbled[len(garbled)-2] ^= 1
	if r := device(t, filepath.Join(t.TempDir(), "g"), "device", "pair", "--code", string(garbled), "--peer", c.node.Addr()); r.code != 1 || !strings.Contains(strings.ToLower(r.stderr), "code") {
		t.Fatalf("garbled code: %+v", r)
	}
	// A code from another cluster: the joiner refuses this node before sending the secret.
	other := startNode(t)
	foreign := other.pairCode("device")
	if r := device(t, filepath.Join(t.TempDir(), "f"), "device", "pair", "--code", foreign, "--peer", c.node.Addr()); r.code != 1 || !strings.Contains(r.stderr, "not part of the cluster that made this code") {
		t.Fatalf("foreign code: %+v", r)
	}
	// A node code cannot pair a device.
	if r := device(t, filepath.Join(t.TempDir(), "n"), "device", "pair", "--code", c.pairCode("node"), "--peer", c.node.Addr()); r.code != 1 || !strings.Contains(r.stderr, "node code") {
		t.Fatalf("node code for a device: %+v", r)
	}

	// Revoke: the same device is refused from then on.
	var devs struct{ Devices []struct{ ID, Name string } }
	json.Unmarshal([]byte(c.cli("device", "list", "--json").stdout), &devs)
	var id string
	for _, d := range devs.Devices {
		if d.Name == "laptop" {
			id = d.ID
		}
	}
	if r := c.cli("device", "revoke", id); r.code != 0 {
		t.Fatalf("revoke: %+v", r)
	}
	// Revoking again is not a failure: what was asked holds.
	if r := c.cli("device", "revoke", id); r.code != 0 || !strings.Contains(r.stdout, "was already revoked") {
		t.Fatalf("revoke again: %+v", r)
	}
	r = device(t, cfg, "job", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "refused this credential: it was revoked") {
		t.Fatalf("revoked device still served: %+v", r)
	}
	if r := c.cli("pair", "list", "--json"); !strings.Contains(r.stdout, `"state": "used"`) {
		t.Fatalf("pair list: %s", r.stdout)
	}
}

func TestPolicySetCheckAndReject(t *testing.T) {
	c := startNode(t)
	cfg, id := c.pairDevice("ci")
	cur := c.cli("policy", "get").stdout
	forbid := cur + "\n@id(\"no-submit-ci\")\nforbid (principal == Palyra::Device::\"" + id + "\", action == Palyra::Action::\"job.submit\", resource);\n"
	file := filepath.Join(t.TempDir(), "p.cedar")
	os.WriteFile(file, []byte(forbid), 0o600)
	if r := c.cli("policy", "set", file); r.code != 0 || !strings.Contains(r.stdout, "version 1") {
		t.Fatalf("policy set: %+v", r)
	}
	r := device(t, cfg, "job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "x")
	if r.code != 1 || !strings.Contains(r.stderr, "no-submit-ci") {
		t.Fatalf("forbidden submit: %+v", r)
	}
	r = c.cli("policy", "check", "--principal", "device:"+id, "--action", "job.submit")
	if r.code != 1 || !strings.Contains(r.stdout, "deny by policy no-submit-ci") {
		t.Fatalf("policy check: %+v", r)
	}
	// A deny exits 1 under --json too (it exited 0).
	r = c.cli("policy", "check", "--principal", "device:"+id, "--action", "job.submit", "--json")
	if r.code != 1 || !strings.Contains(r.stdout, `"allow": false`) || r.stderr != "" {
		t.Fatalf("policy check --json of a deny: %+v; want the decision on stdout, exit 1", r)
	}
	// A malformed policy is rejected and the old one stays.
	os.WriteFile(file, []byte("permit (principal, action, resource"), 0o600)
	if r := c.cli("policy", "set", file); r.code != 1 || !strings.Contains(r.stderr, "policy rejected") {
		t.Fatalf("malformed policy: %+v", r)
	}
	if r := c.cli("policy", "get", "--json"); !strings.Contains(r.stdout, "no-submit-ci") || !strings.Contains(r.stdout, `"version": 1`) {
		t.Fatalf("old policy not kept: %s", r.stdout)
	}
	// A policy that would lock the operator out is refused.
	os.WriteFile(file, []byte("@id(\"only-jobs\")\npermit (principal, action == Palyra::Action::\"job.submit\", resource);\n"), 0o600)
	if r := c.cli("policy", "set", file); r.code != 1 || !strings.Contains(r.stderr, "forbid you") {
		t.Fatalf("lock-out policy: %+v", r)
	}
}

// doctor, run with a revoked device credential, says the credential was
// revoked and how to pair again, not "OK" with a fix that sends the user
// back to doctor.
func TestDoctorSaysARevokedCredentialIsRevoked(t *testing.T) {
	c := startNode(t)
	cfg := filepath.Join(t.TempDir(), "laptop")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr(), "--name", "laptop"); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	if r := device(t, cfg, "doctor", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"CLI credential (device config`) {
		t.Fatalf("doctor before the revocation: %+v", r)
	}
	var devs struct{ Devices []struct{ ID, Name string } }
	json.Unmarshal([]byte(c.cli("device", "list", "--json").stdout), &devs)
	var id string
	for _, d := range devs.Devices {
		if d.Name == "laptop" {
			id = d.ID
		}
	}
	if r := c.cli("device", "revoke", id); r.code != 0 {
		t.Fatalf("revoke: %+v", r)
	}
	r := device(t, cfg, "doctor", "--json")
	var out struct{ Checks []check }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
		t.Fatalf("doctor after the revocation: %v %+v", err, r)
	}
	byName := map[string]check{}
	for _, ch := range out.Checks {
		if strings.HasPrefix(ch.Name, "CLI credential") {
			ch.Name = "CLI credential"
		}
		byName[ch.Name] = ch
	}
	cred := byName["CLI credential"]
	if cred.Status != "fail" || !strings.Contains(cred.Detail, "revoked") ||
		!strings.Contains(cred.Fix, "palyra device pair --code CODE --peer HOST:PORT --force") {
		t.Fatalf("credential check: %+v", cred)
	}
	for _, ch := range out.Checks {
		if strings.Contains(ch.Fix, "palyra doctor") {
			t.Fatalf("doctor sends the user back to doctor: %+v", ch)
		}
	}
	if reach := byName["node reachable"]; reach.Status != "fail" {
		t.Fatalf("reach check: %+v", reach)
	}
}

// A successful call with --addr teaches the device the cluster's nodes as
// a call without it does: after the cluster moved, one call with --addr
// brings the recorded list up to date and later calls need no --addr.
func TestExplicitAddrLearnsTheClustersNodes(t *testing.T) {
	c := startNode(t)
	cfg := filepath.Join(t.TempDir(), "laptop")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr(), "--name", "laptop"); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	// The cluster moved: the device knows only an address where no node is.
	dc, err := readDeviceConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gone := "127.0.0.1:1"
	dc.Addr, dc.Peers = gone, nil
	if err := writeDeviceConfig(cfg, dc); err != nil {
		t.Fatal(err)
	}
	if r := device(t, cfg, "--dial-timeout", "300ms", "job", "list"); r.code != 1 {
		t.Fatalf("with a stale list: %+v", r)
	}
	if r := device(t, cfg, "--addr", c.node.Addr(), "job", "list"); r.code != 0 {
		t.Fatalf("with --addr: %+v", r)
	}
	dc, err = readDeviceConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if dc.Addr != c.node.Addr() || !slices.Contains(dc.Peers, c.node.Addr()) || slices.Contains(dc.Peers, gone) {
		t.Fatalf("recorded after a call with --addr: addr %s peers %v (node at %s)", dc.Addr, dc.Peers, c.node.Addr())
	}
	if r := device(t, cfg, "job", "list"); r.code != 0 {
		t.Fatalf("without --addr afterwards: %+v", r)
	}
}

// pairDevice pairs a plain device named name with its own config dir and
// returns the dir and the device's id.
func (c *cluster) pairDevice(name string) (cfg, id string) {
	c.t.Helper()
	cfg = filepath.Join(c.t.TempDir(), "dev")
	if r := device(c.t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr(), "--name", name); r.code != 0 {
		c.t.Fatalf("pair: %+v", r)
	}
	var devs struct{ Devices []struct{ ID, Name string } }
	json.Unmarshal([]byte(c.cli("device", "list", "--json").stdout), &devs)
	for _, d := range devs.Devices {
		if d.Name == name {
			id = d.ID
		}
	}
	return cfg, id
}

// A device paired with a named code takes the code's name (its host name
// won before); its own --name wins over both.
func TestDeviceTakesTheCodesName(t *testing.T) {
	c := startNode(t)
	names := func() []string {
		var devs struct{ Devices []struct{ Name string } }
		json.Unmarshal([]byte(c.cli("device", "list", "--json").stdout), &devs)
		var out []string
		for _, d := range devs.Devices {
			out = append(out, d.Name)
		}
		return out
	}
	if r := device(t, filepath.Join(t.TempDir(), "a"), "device", "pair", "--code", c.pairCode("device", "--name", "laptop"), "--peer", c.node.Addr()); r.code != 0 {
		t.Fatalf("pair: %+v", r)
	}
	if r := device(t, filepath.Join(t.TempDir(), "b"), "device", "pair", "--code", c.pairCode("device", "--name", "tablet"), "--peer", c.node.Addr(), "--name", "mine"); r.code != 0 {
		t.Fatalf("pair: %+v", r)
	}
	host, _ := os.Hostname()
	if r := device(t, filepath.Join(t.TempDir(), "c"), "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr()); r.code != 0 {
		t.Fatalf("pair: %+v", r)
	}
	got := names()
	for _, want := range []string{"laptop", "mine", host} {
		if !slices.Contains(got, want) {
			t.Fatalf("device names %q, want %q among them", got, want)
		}
	}
	if slices.Contains(got, "tablet") {
		t.Fatalf("the code's name won over the device's --name: %q", got)
	}
}
