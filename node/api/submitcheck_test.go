package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime/netguard"
)

// refused submits req and wants an invalid_argument whose message and
// hint hold the given texts, and nothing committed.
func refused(t *testing.T, ctx context.Context, js jobService, ctl *fakeControl, req *palyrav1.SubmitJobRequest, inMsg, inHint string) {
	t.Helper()
	_, err := js.SubmitJob(ctx, connect.NewRequest(req))
	if err == nil {
		t.Fatalf("%s: accepted", inMsg)
	}
	pe := apiCode(t, err)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(pe.Message, inMsg) || !strings.Contains(pe.Hint, inHint) {
		t.Fatalf("got %v (code %s, message %q, hint %q); want invalid_argument with %q in the message and %q in the hint",
			connect.CodeOf(err), pe.Code, pe.Message, pe.Hint, inMsg, inHint)
	}
	if n := len(ctl.State().Jobs(consensus.JobFilter{})); n != 0 {
		t.Fatalf("%d jobs committed by refused submissions", n)
	}
}

// An empty grant (--allow-host ”, --secret ”) is refused by name: it
// reached the policy as a Grant with no ID ("resource Grant has no ID").
// A host the runtime's egress matcher cannot take (a port, a scheme, a
// CIDR range, a path) or a wildcard is refused when submitted, naming the
// host to give instead: the job was accepted and failed 'blocked' when it
// ran. Browser jobs' hosts go through the same check.
func TestSubmitRefusesEmptyAndMalformedGrants(t *testing.T) {
	js, _, _, ctl, ctx := newSubmitServer(t)
	// An operator: policy would allow every grant that reached it.
	addMember(t, ctl, &raftpb.Member{Kind: "device", Id: "d-submitter1", Operator: true, AddedAtMs: 1, AddedBy: "init"})
	mod := tinyModule("grants")
	script := []byte(`{"steps":[{"action":"navigate","url":"https://example.com/"}]}`)
	for _, tc := range []struct {
		hosts, secrets []string
		inMsg, inHint  string
	}{
		{hosts: []string{""}, inMsg: "empty host name in --allow-host", inHint: "example.com"},
		{hosts: []string{"example.com", "  "}, inMsg: "empty host name in --allow-host", inHint: "example.com"},
		{secrets: []string{""}, inMsg: "empty secret name in --secret", inHint: "palyra secret list"},
		{hosts: []string{"127.0.0.1:18089"}, inMsg: `"127.0.0.1:18089" has a port`, inHint: "give --allow-host 127.0.0.1;"},
		{hosts: []string{"[::1]:80"}, inMsg: "has a port", inHint: "give --allow-host ::1;"},
		{hosts: []string{"http://127.0.0.1"}, inMsg: "has a scheme (http://)", inHint: "give --allow-host 127.0.0.1;"},
		{hosts: []string{"https://api.example.com:8443/v1"}, inMsg: "has a scheme", inHint: "give --allow-host api.example.com;"},
		{hosts: []string{"127.0.0.0/8"}, inMsg: "is an address range (CIDR)", inHint: "one --allow-host per address"},
		{hosts: []string{"api.*.example.com"}, inMsg: "is a wildcard other than *.name", inHint: "no scheme, port, path, CIDR range or other wildcard"},
		{hosts: []string{"example.com/api"}, inMsg: "has a path (/api)", inHint: "give --allow-host example.com;"},
		{hosts: []string{"user@example.com"}, inMsg: "is not a host name or IP address", inHint: "a host is a DNS name (which covers its subdomains; *.name means the same) or one IP address"},
		{hosts: []string{"10.0.0"}, inMsg: "neither a whole IP address nor a host name", inHint: "one IP address"},
	} {
		req := &palyrav1.SubmitJobRequest{WasmModule: mod, AllowHosts: tc.hosts, SecretNames: tc.secrets}
		refused(t, ctx, js, ctl, req, tc.inMsg, tc.inHint)
		if len(tc.hosts) > 0 {
			refused(t, ctx, js, ctl, &palyrav1.SubmitJobRequest{BrowserScript: script, AllowHosts: append([]string{"example.com"}, tc.hosts...)}, tc.inMsg, tc.inHint)
		}
	}
	// Hosts the runtime takes are taken, IPv6 and odd case included
	// (the jobs committed are counted after the refusals).
	for _, h := range []string{"example.com", "Example.COM.", "127.0.0.1", "::1", "[2001:db8::1]", " api.example.com "} {
		if _, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod, AllowHosts: []string{h}})); err != nil {
			t.Errorf("--allow-host %q refused: %v", h, err)
		}
	}
}

// The submit-time host check agrees with the runtime's egress matcher
// (runtime/netguard), which decides at run time: what it refuses is
// refused at submission; what is accepted at submission it takes, and
// the other way round ("*.example.com", which it reads as "example.com",
// included: scripts and policies name it).
func TestAllowHostCheckMatchesTheRuntime(t *testing.T) {
	for _, h := range []string{"", " ", "example.com", "EXAMPLE.com.", "a.b.c.example", "localhost", "127.0.0.1", "::1", "[::1]",
		"::ffff:10.0.0.1", "fe80::1%eth0", "x.com:80", "[::1]:80", "http://x.com", "x.com/p", "10.0.0.0/8", "::/0", "user@x.com",
		"8.8", "1", "host.123", "a b", "x.com?q", "x.com#f", "*.x.com", "*", "a.*.x.com", "[x.com]", "%", strings.Repeat("a", 254),
		"xn--bcher-kva.example", "under_score.example", "-dash.example"} {
		_, rerr := netguard.NormaliseAllowHost(h)
		serr := checkAllowHost(h)
		if rerr != nil && serr == nil {
			t.Errorf("%q: accepted at submission, refused by the runtime (%v)", h, rerr)
		}
		if rerr == nil && serr != nil {
			t.Errorf("%q: taken by the runtime, refused at submission (%v)", h, serr)
		}
	}
}

// A constraint no node label can match is refused, instead of a job that
// waits for ever: "zone!=mars" read as key "zone!"; != is named.
func TestSubmitRefusesConstraintsNoLabelMatches(t *testing.T) {
	js, _, _, ctl, ctx := newSubmitServer(t)
	mod := tinyModule("constraints")
	for _, tc := range []struct {
		cs            map[string]string
		inMsg, inHint string
	}{
		{map[string]string{"zone!": "mars"}, `"zone!=mars": constraints are equality only (k=v), not !=`, "exactly"},
		{map[string]string{"mem>": "4"}, "equality only (k=v), not >=", "exactly"},
		{map[string]string{"zone": "=mars"}, "equality only (k=v), not ==", "exactly"},
		{map[string]string{"zone": "a", "": "b"}, "the key is empty", "--label k=v"},
	} {
		refused(t, ctx, js, ctl, &palyrav1.SubmitJobRequest{WasmModule: mod, Constraints: tc.cs}, tc.inMsg, tc.inHint)
	}
	// Label-shaped constraints pass, and so do labels older nodes may carry
	// from before the label rule (a space in a value).
	if _, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod,
		Constraints: map[string]string{"zone": "eu-west-1", "topology.example.com/rack": "r1:a", "gpu": "", "room": "lab 2"}})); err != nil {
		t.Fatalf("label-shaped constraints: %v", err)
	}
}

// WebAssembly text sent as a module is named as such, with wat2wasm as
// the fix (it was "bad magic" and a hint to build with GOOS=wasip1).
func TestSubmitWATModuleSaysConvertIt(t *testing.T) {
	js, _, _, ctl, ctx := newSubmitServer(t)
	for _, wat := range []string{
		"(module (func (export \"_start\")))",
		"\n  ;; hello.wat\n;; a comment\n(; a (; nested ;) block ;)\r\n\t(module\n)",
		"\xef\xbb\xbf(module)",
	} {
		refused(t, ctx, js, ctl, &palyrav1.SubmitJobRequest{WasmModule: []byte(wat)}, "WebAssembly text (.wat)", "wat2wasm FILE")
	}
	// Anything else that is not wasm keeps the runtime's answer.
	for _, notWat := range []string{"(; unterminated (module", "hello (module", ";; no newline (module"} {
		_, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: []byte(notWat)}))
		if pe := apiCode(t, err); strings.Contains(pe.Message, "WebAssembly text") || !strings.Contains(pe.Message, "bad magic") {
			t.Errorf("%q: %q; want the runtime's bad magic", notWat, pe.Message)
		}
	}
}

// A memory limit under one 64 KiB wasm page is refused when submitted
// (--memory 5 meant 5 bytes: the job was committed, run, and failed).
func TestSubmitRefusesMemoryUnderAPage(t *testing.T) {
	js, _, _, ctl, ctx := newSubmitServer(t)
	addMember(t, ctl, &raftpb.Member{Kind: "device", Id: "d-submitter1", Operator: true, AddedAtMs: 1, AddedBy: "init"})
	mod := tinyModule("mempage")
	for _, b := range []uint64{1, 5, 65535} {
		refused(t, ctx, js, ctl, &palyrav1.SubmitJobRequest{WasmModule: mod, MemoryBytes: b}, "under one 64 KiB wasm page", "--memory 16MiB")
	}
	for _, b := range []uint64{0, 65536, 1_000_000} {
		if _, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: mod, MemoryBytes: b})); err != nil {
			t.Errorf("memory %d refused: %v", b, err)
		}
	}
}
