package cli

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// exampleSkillDir stages examples/skills/web with its two tools built.
func exampleSkillDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "web")
	if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join("..", "examples", "skills", "web", "skill.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"wordcount", "fetchjson"} {
		if err := os.WriteFile(filepath.Join(dir, "modules", m+".wasm"), testwasm.Build(t, m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSkillPackSignInspect: the example skill packs, signs and inspects
// clean with its publisher's key; another key, a flipped byte, an unknown
// manifest field and a wildcard capability each fail with the reason.
func TestSkillPackSignInspect(t *testing.T) {
	dir := exampleSkillDir(t)
	tmp := t.TempDir()
	key := filepath.Join(tmp, "example.key")
	r := runCLI(t, "skill", "keygen", "-o", key)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ed25519:") {
		t.Fatalf("keygen: %d %q %q", r.code, r.stdout, r.stderr)
	}
	pub := strings.TrimSpace(r.stdout)
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	if r := runCLI(t, "skill", "keygen", "-o", key); r.code == 0 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("keygen over an existing key: %d %q", r.code, r.stderr)
	}

	pkg := filepath.Join(tmp, "web.palyra-skill")
	if r := runCLI(t, "skill", "pack", dir, "--key", key, "-o", pkg); r.code != 0 || !strings.Contains(r.stdout, "signed by example") {
		t.Fatalf("pack: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "skill", "inspect", pkg, "--trust", pub, "--json")
	if r.code != 0 {
		t.Fatalf("inspect: %d %q %q", r.code, r.stdout, r.stderr)
	}
	var got struct {
		SignatureOK bool `json:"signature_ok"`
		Manifest    struct {
			SkillID string `json:"skill_id"`
			Tools   []struct {
				ID string `json:"id"`
			} `json:"tools"`
		} `json:"manifest"`
		Audit []any `json:"audit"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if !got.SignatureOK || got.Manifest.SkillID != "example.web" || len(got.Manifest.Tools) != 2 || len(got.Audit) != 0 {
		t.Fatalf("inspect --json: %s", r.stdout)
	}

	// Another publisher key.
	other := filepath.Join(tmp, "other.key")
	otherPub := strings.TrimSpace(runCLI(t, "skill", "keygen", "-o", other).stdout)
	if r := runCLI(t, "skill", "inspect", pkg, "--trust", otherPub); r.code == 0 || !strings.Contains(r.stdout, "signed with another key") {
		t.Errorf("inspect with another trusted key: %d %q", r.code, r.stdout)
	}
	// Re-signed with the other key: valid on its own, refused against the first.
	resigned := filepath.Join(tmp, "resigned.palyra-skill")
	if r := runCLI(t, "skill", "sign", pkg, "--key", other, "-o", resigned); r.code != 0 {
		t.Fatalf("sign: %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "skill", "inspect", resigned, "--trust", pub); r.code == 0 {
		t.Errorf("a package re-signed by another key passed against the publisher's key: %q", r.stdout)
	}

	// A flipped byte in a module, the sums left alone: refused as altered.
	flipped := filepath.Join(tmp, "flipped.palyra-skill")
	rewriteEntry(t, pkg, flipped, "modules/wordcount.wasm", func(b []byte) []byte { b[len(b)/2] ^= 1; return b })
	if r := runCLI(t, "skill", "inspect", flipped, "--trust", pub); r.code == 0 || !strings.Contains(r.stderr, "altered") {
		t.Errorf("flipped byte: %d %q", r.code, r.stderr)
	}

	// An unknown manifest field, and a wildcard capability.
	m, _ := os.ReadFile(filepath.Join(dir, "skill.toml"))
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), []byte(strings.Replace(string(m), "[capabilities]", "homepage = \"x\"\n[capabilities]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "skill", "pack", dir, "-o", filepath.Join(tmp, "x.palyra-skill")); r.code == 0 || !strings.Contains(r.stderr, "unknown field(s) homepage") {
		t.Errorf("unknown field: %d %q", r.code, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "skill.toml"), []byte(strings.Replace(string(m), `http_hosts = ["example.com"]`, `http_hosts = ["*"]`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	wild := filepath.Join(tmp, "wild.palyra-skill")
	if r := runCLI(t, "skill", "pack", dir, "--key", key, "-o", wild); r.code != 0 {
		t.Fatalf("pack with a wildcard: %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "skill", "inspect", wild, "--trust", pub); r.code == 0 || !strings.Contains(r.stdout, "wildcard") {
		t.Errorf("wildcard capability: %d %q", r.code, r.stdout)
	}
}

// rewriteEntry copies the package in to out with entry name changed by f.
func rewriteEntry(t *testing.T, in, out, name string, f func([]byte) []byte) {
	t.Helper()
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range zr.File {
		rc, err := e.Open()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(rc)
		rc.Close()
		c := b.Bytes()
		if e.Name == name {
			c = f(c)
		}
		w, _ := zw.Create(e.Name)
		_, _ = w.Write(c)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSkillLimitsShowTheirDefaults: a manifest that leaves fuel and
// memory_mib out (example.guard) is shown with the defaults its runs get,
// not "fuel=0 memory_mib=0", by inspect and by get.
func TestSkillLimitsShowTheirDefaults(t *testing.T) {
	key := filepath.Join(t.TempDir(), "k")
	runCLI(t, "skill", "keygen", "-o", key)
	guard := packExample(t, "guard", key, "gate")
	want := "fuel=10000000000 (default) memory_mib=64 (default) wall_clock_ms=10000\n"
	if r := runCLI(t, "skill", "inspect", guard); r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Fatalf("inspect: %d %q %q", r.code, r.stdout, r.stderr)
	}
	c := startNode(t)
	if r := c.cli("skill", "install", guard, "--trust-on-first-use"); r.code != 0 {
		t.Fatalf("install: %q", r.stderr)
	}
	if r := c.cli("skill", "get", "example.guard"); r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Fatalf("get: %d %q %q", r.code, r.stdout, r.stderr)
	}
}
