package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/node"
)

// A node starts from a TOML config file with a profile: flags beat the
// file, the file beats the profile, --print-config says which is which,
// and the node really runs with those settings.
func TestNodeStartsFromConfigFileWithProfile(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "palyra.toml")
	os.WriteFile(cfg, []byte(`profile = "local"
data-dir = "`+dataDir+`"
listen = "127.0.0.1:0"
label = ["zone=a", "disk=ssd"]
wasm-slots = 3
browser-slots = -1
lease-ttl = "5s"
`), 0o600)

	r := runCLI(t, "node", "start", "--config", cfg, "--wasm-slots", "2", "--print-config")
	if r.code != 0 {
		t.Fatalf("print-config: %+v", r)
	}
	for _, want := range []string{
		`wasm-slots = 2`, "# flag",
		`label = ["zone=a", "disk=ssd"]`,
		`target-voters = 1`, "# profile local",
		`data-dir = "` + dataDir + `"`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("print-config lacks %q:\n%s", want, r.stdout)
		}
	}
	if _, err := os.Stat(dataDir); err == nil {
		t.Fatal("--print-config created the data dir")
	}

	// Bad files and profiles say what to fix and start nothing.
	bad := filepath.Join(dir, "bad.toml")
	for content, want := range map[string]string{
		`wasm-slot = 3`:       `unknown key "wasm-slot" (did you mean "wasm-slots"?)`,
		`wasm-slots = "many"`: `wasm-slots = many`,
		`profile = "cloud"`:   `unknown profile "cloud"`,
		"listen = \"10.9.9.9:7444\"\nprofile = \"local\"": "profile local binds loopback only",
		`listen = `: "--config " + bad,
	} {
		os.WriteFile(bad, []byte(content), 0o600)
		if r := runCLI(t, "node", "start", "--config", bad, "--print-config"); r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("config %q: %+v, want %q", content, r, want)
		}
	}

	// Start it for real.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out, errb bytes.Buffer
	go func() {
		done <- run(ctx, []string{"palyra", "node", "start", "--config", cfg, "--log-format", "json"}, strings.NewReader(""), &out, &errb)
	}()
	var addr string
	deadline := time.Now().Add(60 * time.Second)
	for addr == "" {
		if st, err := (node.Layout{Dir: dataDir}).ReadState(); err == nil && st.Address != "" && !strings.HasSuffix(st.Address, ":0") {
			addr = st.Address
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("node never started: %s", errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var list struct {
		Nodes []struct {
			Capacity map[string]int    `json:"capacity"`
			Labels   map[string]string `json:"labels"`
			System   map[string]string `json:"system_labels"`
			Placed   *int              `json:"placed"`
			Running  *int              `json:"running"` // the older name of placed
		} `json:"nodes"`
	}
	waitFor(t, "the node to answer", func() bool {
		r := runCLI(t, "--data-dir", dataDir, "--addr", addr, "nodes", "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &list) == nil && len(list.Nodes) == 1
	})
	nodes := list.Nodes
	if n := nodes[0]; n.Placed == nil || n.Running == nil || *n.Placed != *n.Running {
		t.Fatalf("nodes --json: placed %v, running %v; want both, equal (the table's PLACED)", n.Placed, n.Running)
	}
	if nodes[0].Capacity["wasm"] != 3 || nodes[0].Labels["zone"] != "a" || nodes[0].Labels["disk"] != "ssd" {
		t.Fatalf("the node runs with %+v, not the config file's settings", nodes[0])
	}
	// labels are the operator's, as in the table; the node's own apart.
	if len(nodes[0].Labels) != 2 || nodes[0].System["palyra.ca"] == "" {
		t.Fatalf("nodes --json labels %v, system labels %v; want the two set, and the node's own (palyra.ca) apart", nodes[0].Labels, nodes[0].System)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("node exited %d: %s", code, errb.String())
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// --print-config shows a metrics address recorded in the data dir as
// recorded, an explicit --metrics-listen as the flag's, and off (or an
// explicit "") as off.
func TestPrintConfigShowsRecordedMetricsListen(t *testing.T) {
	dir := t.TempDir()
	l := node.Layout{Dir: dir}
	if err := l.WriteState(node.State{NodeID: "n1", ClusterName: "palyra", Address: "127.0.0.1:7999", Listen: "127.0.0.1:7999", Version: 1, MetricsListen: "127.0.0.1:9100"}); err != nil {
		t.Fatal(err)
	}
	line := func(out, key string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, key+" = ") || strings.HasPrefix(l, "# "+key+" = ") {
				return l
			}
		}
		return ""
	}
	for _, tc := range []struct {
		args       []string
		want, from string
	}{
		{nil, `metrics-listen = "127.0.0.1:9100"`, "recorded in the data dir"},
		{[]string{"--metrics-listen", "127.0.0.1:9200"}, `metrics-listen = "127.0.0.1:9200"`, "# flag"},
		{[]string{"--metrics-listen", "off"}, `metrics-listen = "off"`, "# flag"},
		{[]string{"--metrics-listen", ""}, `metrics-listen = "off"`, "# flag"},
	} {
		r := runCLI(t, append([]string{"--data-dir", dir, "node", "start", "--print-config"}, tc.args...)...)
		if r.code != 0 {
			t.Fatalf("%v: %+v", tc.args, r)
		}
		if l := line(r.stdout, "metrics-listen"); !strings.Contains(l, tc.want) || !strings.Contains(l, tc.from) {
			t.Errorf("%v: metrics-listen line %q, want %q from %q", tc.args, l, tc.want, tc.from)
		}
	}
}

// --print-config says when 'node start' would refuse the configuration it
// prints (a metrics address other hosts reach without
// --metrics-allow-remote printed silently).
func TestPrintConfigWarnsOfWhatStartRefuses(t *testing.T) {
	r := runCLI(t, "node", "start", "--data-dir", t.TempDir(), "--metrics-listen", "0.0.0.0:9765", "--print-config")
	if !strings.Contains(r.stdout, `metrics-listen = "0.0.0.0:9765"`) || !strings.Contains(r.stderr, "warning: 'node start' refuses this configuration") ||
		!strings.Contains(r.stderr, "--metrics-allow-remote") {
		t.Fatalf("print-config of a refused metrics address: %+v", r)
	}
	if r := runCLI(t, "node", "start", "--data-dir", t.TempDir(), "--metrics-listen", "127.0.0.1:9765", "--print-config"); strings.Contains(r.stderr, "warning") {
		t.Fatalf("print-config of a loopback metrics address: %+v", r)
	}
}
