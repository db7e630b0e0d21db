package ansible

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// helper is the one-shot setup script that the palyra_cluster role installs.
const helper = "roles/palyra_cluster/files/palyra-run-until-ready"

// runHelper runs the helper with stand-in node commands (sh scripts), so its
// start/stop logic is tested without palyra.
func runHelper(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return run(t, time.Minute, os.Environ(), "bash", append([]string{helper}, args...)...)
}

func TestHelperRefusesBadUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{dir, "10", "sh"},
		{dir, "10", "-x", "sh", "-c", "true"},
		{dir, "0", "--", "sh", "-c", "true"},
		{dir, "soon", "--", "sh", "-c", "true"},
	} {
		out, code := runHelper(t, args...)
		if code != 2 || !strings.Contains(out, "palyra-run-until-ready") {
			t.Errorf("args %q: exit %d, output %q; want exit 2 with a usage message", args, code, out)
		}
	}
}

func TestHelperSkipsASetUpNode(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "node.json"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	out, code := runHelper(t, dir, "10", "--", "sh", "-c", `touch "$1"`, "sh", marker)
	if code != 0 {
		t.Fatalf("exit %d, want 0; output:\n%s", code, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although node.json existed")
	}
}

func TestHelperStopsTheNodeOnceReady(t *testing.T) {
	dir := t.TempDir()
	stopped := filepath.Join(dir, "stopped-by-sigterm")
	// A stand-in node: sets itself up, says it is ready, runs until SIGTERM.
	node := `trap 'touch "$2"; exit 0' TERM
echo '{}' > "$1/node.json"
echo 'level=INFO msg="node ready"' >&2
while :; do sleep 0.1; done`
	out, code := runHelper(t, dir, "30", "--", "sh", "-c", node, "sh", dir, stopped)
	if code != 0 {
		t.Fatalf("exit %d, want 0; output:\n%s", code, out)
	}
	if _, err := os.Stat(stopped); err != nil {
		t.Fatalf("the node was not stopped with SIGTERM (%v); output:\n%s", err, out)
	}
}

func TestHelperReportsAnEarlyExitWithoutItsArguments(t *testing.T) {
	dir := t.TempDir()
	out, code := runHelper(t, dir, "30", "--", "sh", "-c", `echo "pairing refused" >&2; exit 3`, "sh", "P1-SECRET-CODE")
	if code != 3 {
		t.Fatalf("exit %d, want the command's 3; output:\n%s", code, out)
	}
	if !strings.Contains(out, "pairing refused") {
		t.Errorf("output lacks the command's log:\n%s", out)
	}
	if strings.Contains(out, "P1-SECRET-CODE") {
		t.Errorf("output repeats the command's arguments (they may hold a pairing code):\n%s", out)
	}
}

func TestHelperTimesOut(t *testing.T) {
	t.Run("without node.json it fails", func(t *testing.T) {
		dir := t.TempDir()
		out, code := runHelper(t, dir, "1", "--", "sh", "-c", "while :; do sleep 0.1; done")
		if code != 1 || !strings.Contains(out, "node.json") {
			t.Fatalf("exit %d, want 1 naming node.json; output:\n%s", code, out)
		}
	})
	t.Run("with node.json it warns and succeeds", func(t *testing.T) {
		dir := t.TempDir()
		out, code := runHelper(t, dir, "1", "--", "sh", "-c", `echo '{}' > "$1/node.json"; while :; do sleep 0.1; done`, "sh", dir)
		if code != 0 || !strings.Contains(out, "warning") {
			t.Fatalf("exit %d, want 0 with a warning; output:\n%s", code, out)
		}
	})
}
