package ansible

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// installHint is what a machine needs for these tests (Debian packages).
const installHint = "apt-get install -y --no-install-recommends ansible-core ansible-lint"

// requireTool returns the path of the named program. When it is missing the
// test fails under CI=true (CI must install it) and is skipped, loudly,
// elsewhere.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed, and CI=true needs it: %s", name, installHint)
	}
	t.Skipf("SKIPPED: %s is not installed (%s); with CI=true this test fails instead", name, installHint)
	return ""
}

// ansibleEnv is the environment for Ansible commands: no ansible.cfg or
// temp dirs of the user's, no colour, and only the collections that ship
// with ansible-core (the roles use ansible.builtin alone, so the small
// ansible-core package is enough).
func ansibleEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ansible.cfg")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"ANSIBLE_CONFIG="+cfg,
		"ANSIBLE_LOCAL_TEMP="+filepath.Join(dir, "local"),
		"ANSIBLE_REMOTE_TMP="+filepath.Join(dir, "remote"),
		"ANSIBLE_NOCOLOR=1",
		"ANSIBLE_RETRY_FILES_ENABLED=false",
		"ANSIBLE_PIPELINING=true",
		"ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false",
		"ANSIBLE_COLLECTIONS_PATH="+filepath.Join(dir, "collections"),
	)
	return append(env, extra...)
}

// run runs a command in this directory and returns its combined output and
// exit code; it fails the test if the command cannot run at all.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %s; output:\n%s", name, args, timeout, out.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return out.String(), 0
}

func TestSiteSyntaxCheck(t *testing.T) {
	bin := requireTool(t, "ansible-playbook")
	out, code := run(t, 2*time.Minute, ansibleEnv(t), bin, "--syntax-check", "-i", "inventory.example.ini", "site.yml")
	if code != 0 {
		t.Fatalf("ansible-playbook --syntax-check site.yml exited %d:\n%s", code, out)
	}
}

func TestAnsibleLint(t *testing.T) {
	bin := requireTool(t, "ansible-lint")
	out, code := run(t, 3*time.Minute, ansibleEnv(t), bin, "--offline", "--nocolor", "site.yml", "roles/palyra_node", "roles/palyra_cluster")
	if code != 0 {
		t.Fatalf("ansible-lint exited %d:\n%s", code, out)
	}
}
