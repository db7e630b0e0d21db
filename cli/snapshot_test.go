package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
)

// The snapshot commands as an operator uses them: save (to a file, mode
// 0600, and to stdout), inspect, refusals of a damaged file, of a used
// data dir, of a device that is not an operator, and of recovering a
// node that runs.
func TestSnapshotCommands(t *testing.T) {
	c := startNode(t)
	if r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "reverse"), "--input", "hello", "--wait"); r.code != 0 || r.stdout != "olleh" {
		t.Fatalf("submit: %+v", r)
	}
	if r := c.cli("kv", "put", "colour", "blue"); r.code != 0 {
		t.Fatalf("kv put: %+v", r)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "c.snap")
	r := c.cli("snapshot", "save", file, "--json")
	var saved struct {
		Jobs      int    `json:"jobs"`
		Blobs     int    `json:"blobs"`
		RaftIndex uint64 `json:"raft_index"`
		SHA256    string `json:"sha256"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &saved) != nil || saved.Jobs != 1 || saved.Blobs != 1 || saved.RaftIndex == 0 || len(saved.SHA256) != 64 {
		t.Fatalf("snapshot save: %+v", r)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v %v", st.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("the save left temporary files: %v", entries)
	}
	if r := runCLI(t, "snapshot", "inspect", file); r.code != 0 || !strings.Contains(r.stdout, "intact") || !strings.Contains(r.stdout, saved.SHA256) ||
		!strings.Contains(r.stdout, "kv          1 keys") || !strings.Contains(r.stdout, "verified from its base") {
		t.Fatalf("snapshot inspect: %+v", r)
	}
	r = runCLI(t, "snapshot", "inspect", file, "--json")
	var inspected struct {
		KVKeys int `json:"kv_keys"`
		Audit  struct {
			Records  int    `json:"records"`
			HeadSeq  uint64 `json:"head_seq"`
			Head     string `json:"head_sha256"`
			Verified bool   `json:"verified"`
		} `json:"audit"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &inspected) != nil || inspected.KVKeys != 1 || !inspected.Audit.Verified ||
		inspected.Audit.Records == 0 || inspected.Audit.HeadSeq == 0 || len(inspected.Audit.Head) != 64 {
		t.Fatalf("snapshot inspect --json: %+v", r)
	}

	data, _ := os.ReadFile(file)
	data[len(data)/2] ^= 1
	bad := filepath.Join(dir, "bad.snap")
	os.WriteFile(bad, data, 0o600)
	r = runCLI(t, "snapshot", "inspect", bad, "--json")
	var e struct {
		Error struct{ Code, Hint string } `json:"error"`
	}
	if r.code != 1 || json.Unmarshal([]byte(r.stderr), &e) != nil || e.Error.Code != "corrupt_snapshot" || e.Error.Hint == "" {
		t.Fatalf("inspect of a damaged file: %+v", r)
	}
	if r := runCLI(t, "--data-dir", c.dir, "snapshot", "restore", file, "--listen", "127.0.0.1:7"); r.code != 1 || !strings.Contains(r.stderr, "not empty") {
		t.Fatalf("restore into the live node's data dir: %+v", r)
	}
	if r := runCLI(t, "--data-dir", c.dir, "snapshot", "restore", file, "--listen", "127.0.0.1:7", "--force"); r.code != 1 || !strings.Contains(r.stderr, "in use") {
		t.Fatalf("forced restore into the live node's data dir: %+v", r)
	}
	// Restored elsewhere (offline: nothing listens): the summary counts
	// nodes and devices apart.
	if r := runCLI(t, "--data-dir", filepath.Join(t.TempDir(), "restored"), "snapshot", "restore", file, "--listen", "127.0.0.1:7"); r.code != 0 ||
		!strings.Contains(r.stdout, "1 node, 1 device, ") || strings.Contains(r.stdout, "members") {
		t.Fatalf("restore into a new data dir: %+v", r)
	}

	r = c.cli("snapshot", "save", "-")
	if r.code != 0 {
		t.Fatalf("snapshot save -: %+v", r)
	}
	if info, err := node.InspectSnapshot(strings.NewReader(r.stdout)); err != nil || info.Jobs != 1 {
		t.Fatalf("snapshot streamed to stdout: %+v %v", info, err)
	}
	if r := c.cli("snapshot", "save", "-", "--json"); r.code != 2 {
		t.Fatalf("--json with '-': %+v", r)
	}
	if r := c.cli("snapshot", "save", filepath.Join(t.TempDir(), "nodir", "x.snap")); r.code == 0 || !strings.Contains(r.stderr, "nodir does not exist") || strings.Contains(r.stderr, ".tmp-") {
		t.Fatalf("a file in a missing directory: %+v", r)
	}

	cfg := filepath.Join(t.TempDir(), "device")
	if r := device(t, cfg, "device", "pair", "--code", c.pairCode("device"), "--peer", c.node.Addr()); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	other := filepath.Join(dir, "device.snap")
	if r := device(t, cfg, "snapshot", "save", other); r.code != 1 || !strings.Contains(r.stderr, "snapshot.save") {
		t.Fatalf("a plain device saved a snapshot: %+v", r)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("a refused save left %s", other)
	}

	if r := runCLI(t, "--data-dir", c.dir, "node", "recover", "--yes"); r.code != 1 || !strings.Contains(r.stderr, "in use") {
		t.Fatalf("recovering a running node: %+v", r)
	}
}

// A save never replaces an existing file (yesterday's backup, say) unless
// --force, and a refused save leaves neither a changed file nor a
// temporary one beside it.
func TestSnapshotSaveKeepsAnExistingFile(t *testing.T) {
	c := startNode(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "backup.snap")
	if err := os.WriteFile(file, []byte("yesterday"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.cli("snapshot", "save", file)
	if r.code != 1 || !strings.Contains(r.stderr, "backup.snap exists") || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("save over an existing file: %+v; want a refusal naming --force", r)
	}
	if b, _ := os.ReadFile(file); string(b) != "yesterday" {
		t.Fatalf("the existing file was changed: %.40q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("the refused save left files: %v", entries)
	}
	if r := c.cli("snapshot", "save", file, "--force"); r.code != 0 {
		t.Fatalf("save --force: %+v", r)
	}
	if info, err := node.InspectSnapshot(mustOpen(t, file)); err != nil || info.Header.RaftIndex == 0 {
		t.Fatalf("the file saved with --force: %+v %v", info, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("save --force left files: %v", entries)
	}
	// A directory is refused before the snapshot is taken, --force or
	// not (it used to be taken whole, then fail renaming onto the
	// directory with a raw error).
	for _, args := range [][]string{{dir}, {dir, "--force"}} {
		r := c.cli(append([]string{"snapshot", "save"}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "is a directory") || !strings.Contains(r.stderr, filepath.Join(dir, "palyra.snap")) {
			t.Fatalf("save to a directory %v: %+v; want a refusal naming a file in it", args, r)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("a save to the directory left files: %v", entries)
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
