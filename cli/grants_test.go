package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
)

// Secrets, KV and HTTP egress work only with grants, and a secret's value
// appears in no job record, API answer or log.
func TestGrantsSecretsKVAndFetch(t *testing.T) {
	c := startNode(t)
	secret := "s3cr3t-value-never-shown"
	in := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(in, []byte(secret), 0o600)
	if r := c.cli("secret", "set", "api-token", "--from-file", in); r.code != 0 {
		t.Fatalf("secret set: %+v", r)
	}
	if r := c.cli("secret", "list", "--json"); !strings.Contains(r.stdout, `"api-token"`) || strings.Contains(r.stdout, secret) {
		t.Fatalf("secret list: %+v", r)
	}
	sum := sha256.Sum256([]byte(secret))

	// With the grant the job reads it (and prints only its hash).
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "secret"), "--input", "api-token", "--secret", "api-token", "--wait", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, hex.EncodeToString(sum[:])) {
		t.Fatalf("granted secret: %+v", r)
	}
	// Without it, a capability error.
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "secret"), "--input", "api-token", "--wait", "--json")
	if r.code != 1 || !strings.Contains(r.stdout, "grant") {
		t.Fatalf("ungranted secret: %+v", r)
	}
	// KV: a counter under a granted prefix, and nothing outside it.
	for want := 1; want <= 3; want++ {
		r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "kv"), "--input", "app/counter", "--kv-prefix", "app/", "--wait")
		if r.code != 0 || strings.TrimSpace(r.stdout) != fmt.Sprint(want) {
			t.Fatalf("kv run %d: %+v", want, r)
		}
	}
	if r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "kv"), "--input", "other/counter", "--kv-prefix", "app/", "--wait"); r.code != 1 {
		t.Fatalf("kv outside prefix: %+v", r)
	}
	// HTTP egress to a granted local server (private address granted explicitly).
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello from the test server") }))
	defer srv.Close()
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "fetch"), "--input", srv.URL, "--allow-host", "127.0.0.1", "--allow-private", "--wait")
	if r.code != 0 || !strings.Contains(r.stdout, "hello from the test server") {
		t.Fatalf("granted fetch: %+v", r)
	}
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "fetch"), "--input", srv.URL, "--allow-host", "127.0.0.1", "--wait")
	if r.code != 1 {
		t.Fatalf("private address without grant: %+v", r)
	}
	r = c.cli("job", "submit", "--wasm", testwasm.Path(t, "fetch"), "--input", srv.URL, "--wait")
	if r.code != 1 {
		t.Fatalf("fetch without grant: %+v", r)
	}
	// The value is nowhere: not in any job record, nor on disk in the raft log.
	if r := c.cli("job", "list", "--json"); strings.Contains(r.stdout, secret) {
		t.Fatal("secret value in a job record")
	}
	filepath.Walk(filepath.Join(c.dir, "raft"), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("secret value in plaintext in %s", p)
			}
		}
		return nil
	})
}

// A node's --host-call-timeout bounds a wasm job's HTTP fetch, and the
// failure names it (a fetch past 10 s failed with no way to raise it).
func TestHostCallTimeoutIsTheNodes(t *testing.T) {
	c := startNodeWith(t, node.Config{HostCallTimeout: 300 * time.Millisecond})
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	r := c.cli("job", "submit", "--wasm", testwasm.Path(t, "fetch"), "--input", srv.URL, "--allow-host", "127.0.0.1", "--allow-private", "--timeout", "30s", "--wait")
	if r.code != exitFailure || !strings.Contains(r.stdout+r.stderr, "took longer than 300ms") || !strings.Contains(r.stdout+r.stderr, "--host-call-timeout") {
		t.Fatalf("a fetch that hangs under a 300ms host call limit: %+v; want it to fail naming the limit and the flag", r)
	}
	if r := runCLI(t, "node", "start", "--data-dir", t.TempDir(), "--host-call-timeout", "5ms"); r.code != exitUsage || !strings.Contains(r.stderr, "between 100ms and 1h") {
		t.Fatalf("node start --host-call-timeout 5ms: %+v; want a usage error", r)
	}
}
