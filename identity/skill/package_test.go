package skill

import (
	"archive/zip"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// emptyModule is the smallest valid WebAssembly module.
var emptyModule = []byte("\x00asm\x01\x00\x00\x00")

// fsModule imports wasi_snapshot_preview1.path_open (a function of type 0).
var fsModule = append(append([]byte{}, emptyModule...),
	2, 36, 1, // import section, 36 bytes, 1 import
	22, 'w', 'a', 's', 'i', '_', 's', 'n', 'a', 'p', 's', 'h', 'o', 't', '_', 'p', 'r', 'e', 'v', 'i', 'e', 'w', '1',
	9, 'p', 'a', 't', 'h', '_', 'o', 'p', 'e', 'n',
	0, 0)

const goodManifest = `manifest_version = 1
skill_id = "acme.echo"
name = "Echo"
version = "1.2.3"
publisher = "acme"

[capabilities]
http_hosts = ["api.example.com"]
kv_prefix = "echo/"

[[tools]]
id = "echo"
name = "Echo"
module = "modules/echo.wasm"
input_schema = '{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}'
output_schema = '{"type":"object"}'
`

// skillDir writes a skill directory with the given manifest and module.
func skillDir(t testing.TB, manifest string, module []byte) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "modules"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "assets"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, ManifestFile), []byte(manifest), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "modules", "echo.wasm"), module, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "assets", "README.txt"), []byte("hello"), 0o644))
	return dir
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// signed packs and signs the good skill; it returns the file's bytes and
// the publisher key.
func signed(t testing.TB) ([]byte, ed25519.PublicKey) {
	t.Helper()
	p, err := FromDir(skillDir(t, goodManifest, emptyModule))
	must(t, err)
	pub, priv, _ := ed25519.GenerateKey(nil)
	p.Sign(priv)
	b, err := p.Bytes()
	must(t, err)
	return b, pub
}

// rawZip writes entries in the order given, with no checks.
func rawZip(t testing.TB, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.Create(e[0])
		must(t, err)
		_, err = w.Write([]byte(e[1]))
		must(t, err)
	}
	must(t, zw.Close())
	return buf.Bytes()
}

// entriesOf lists a package file's entries (name, contents) in file order.
func entriesOf(t testing.TB, b []byte) [][2]string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	must(t, err)
	var out [][2]string
	for _, f := range zr.File {
		c, err := readEntry(f)
		must(t, err)
		out = append(out, [2]string{f.Name, string(c)})
	}
	return out
}

func TestPackSignVerifyRoundTrip(t *testing.T) {
	b, pub := signed(t)
	p, err := Read(b)
	must(t, err)
	if p.Manifest.SkillID != "acme.echo" || p.Manifest.Tool("echo") == nil || p.Signature == nil {
		t.Fatalf("read back %+v", p.Manifest)
	}
	got, err := p.Verify(pub)
	must(t, err)
	if !got.Equal(pub) {
		t.Fatal("Verify returned another key")
	}
	if _, err := p.Verify(nil); err != nil {
		t.Fatalf("verify without a trusted key: %v", err)
	}
	if f := p.Audit(); len(f) != 0 {
		t.Fatalf("audit of a good package: %v", f)
	}
	// The same contents give the same bytes.
	again, err := p.Bytes()
	must(t, err)
	if !bytes.Equal(again, b) {
		t.Fatal("writing the package read back gave other bytes")
	}
}

// A flipped byte in any entry is refused: by SHA256SUMS when the list is
// left as it was, by the signature when the list is made again.
func TestFlippedByteIsRefused(t *testing.T) {
	b, pub := signed(t)
	orig := entriesOf(t, b)
	for i, e := range orig {
		if e[0] == SumsFile || e[0] == SignatureFile || e[1] == "" {
			continue
		}
		for _, at := range []int{0, len(e[1]) / 2, len(e[1]) - 1} {
			mod := append([][2]string(nil), orig...)
			c := []byte(e[1])
			c[at] ^= 0x01
			mod[i] = [2]string{e[0], string(c)}
			if _, err := Read(rawZip(t, mod...)); err == nil || !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s byte %d flipped: Read gave %v, want a refusal", e[0], at, err)
			}
			// The attacker also rewrites SHA256SUMS.
			entries := map[string][]byte{}
			for _, x := range mod {
				if x[0] != SignatureFile {
					entries[x[0]] = []byte(x[1])
				}
			}
			for j, x := range mod {
				if x[0] == SumsFile {
					mod[j][1] = string(sums(entries))
				}
			}
			p, err := Read(rawZip(t, mod...))
			if err != nil {
				continue // the change made the manifest invalid: refused anyway
			}
			if _, err := p.Verify(pub); !errors.Is(err, ErrBadSignature) {
				t.Errorf("%s byte %d flipped, sums rewritten: Verify gave %v, want ErrBadSignature", e[0], at, err)
			}
		}
	}
}

func TestWrongKeyAndPublisherAreRefused(t *testing.T) {
	b, _ := signed(t)
	p, err := Read(b)
	must(t, err)
	other, _, _ := ed25519.GenerateKey(nil)
	if _, err := p.Verify(other); !errors.Is(err, ErrKeyMismatch) || !strings.Contains(err.Error(), `publisher "acme"`) {
		t.Fatalf("another trusted key: %v, want ErrKeyMismatch naming the publisher", err)
	}
	// A signature that claims another publisher.
	p.Signature.Publisher = "mallory"
	if _, err := p.Verify(nil); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "mallory") {
		t.Fatalf("publisher mismatch: %v", err)
	}
	// Unsigned.
	p.Signature = nil
	if _, err := p.Verify(nil); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
}

func TestManifestRefusals(t *testing.T) {
	for _, tc := range []struct{ name, manifest, want string }{
		{"unknown field", strings.Replace(goodManifest, `name = "Echo"`, `name = "Echo"`+"\nhomepage = \"x\"", 1), "unknown field(s) homepage"},
		{"unknown capability", strings.Replace(goodManifest, `kv_prefix = "echo/"`, `kv_prefix = "echo/"`+"\nfilesystem = [\"/\"]", 1), "capabilities.filesystem"},
		{"bad version", strings.Replace(goodManifest, `version = "1.2.3"`, `version = "latest"`, 1), "semantic versioning"},
		{"pre-release with a leading zero", strings.Replace(goodManifest, `version = "1.2.3"`, `version = "1.2.3-01"`, 1), "semantic versioning"},
		{"empty pre-release identifier", strings.Replace(goodManifest, `version = "1.2.3"`, `version = "1.2.3-a..b"`, 1), "semantic versioning"},
		{"bad schema", strings.Replace(goodManifest, `output_schema = '{"type":"object"}'`, `output_schema = '{"type":12}'`, 1), "output_schema"},
		{"remote schema ref", strings.Replace(goodManifest, `output_schema = '{"type":"object"}'`, `output_schema = '{"$ref":"https://example.com/s.json"}'`, 1), "self-contained"},
		{"no tools", goodManifest[:strings.Index(goodManifest, "[[tools]]")], "tools"},
		{"manifest version", strings.Replace(goodManifest, "manifest_version = 1", "manifest_version = 2", 1), "manifest_version is 2"},
		{"tool host beyond the skill's", goodManifest + "[tools.capabilities]\nhttp_hosts = [\"evil.example\"]\n", `tools[0].capabilities.http_hosts: "evil.example" is not in the skill's`},
		{"tool secret beyond the skill's", goodManifest + "[tools.capabilities]\nsecrets = [\"root\"]\n", `tools[0].capabilities.secrets: "root" is not in`},
		{"tool kv prefix outside the skill's", goodManifest + "[tools.capabilities]\nkv_prefix = \"other/\"\n", `tools[0].capabilities.kv_prefix: "other/" is not under`},
		{"tool private addresses", goodManifest + "[tools.capabilities]\nallow_private = true\n", "tools[0].capabilities.allow_private"},
		{"tool unknown capability", goodManifest + "[tools.capabilities]\nfuel = 3\n", "fuel"},
		{"build metadata", strings.Replace(goodManifest, `version = "1.2.3"`, `version = "1.2.3-beta+x"`, 1), "without +BUILD metadata"},
	} {
		_, err := ParseManifest([]byte(tc.manifest))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestPathsAndStructureAreRefused(t *testing.T) {
	b, _ := signed(t)
	orig := entriesOf(t, b)
	for _, tc := range []struct{ name, path, want string }{
		{"dot-dot", "assets/../../etc/passwd", ".."},
		{"absolute", "/etc/passwd", "absolute"},
		{"colon", "assets/c:x", "':'"},
		{"backslash", `assets\x`, `'\'`},
		{"unexpected", "run.sh", "unexpected entry"},
		{"not clean", "assets//x", "not clean"},
	} {
		mod := append(append([][2]string(nil), orig...), [2]string{tc.path, "x"})
		_, err := Read(rawZip(t, mod...))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (%q): got %v, want a refusal containing %q", tc.name, tc.path, err, tc.want)
		}
	}
	// A duplicate entry.
	mod := append(append([][2]string(nil), orig...), orig[0])
	if _, err := Read(rawZip(t, mod...)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate: %v", err)
	}
	// A tool whose module is missing.
	var noModule [][2]string
	for _, e := range orig {
		if !strings.HasPrefix(e[0], "modules/") {
			noModule = append(noModule, e)
		}
	}
	noModule = append(noModule, [2]string{"modules/other.wasm", string(emptyModule)})
	if _, err := Read(rawZip(t, noModule...)); err == nil || !strings.Contains(err.Error(), "modules/echo.wasm") {
		t.Errorf("missing module: %v", err)
	}
	if _, err := Read([]byte("not a zip")); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "skill pack") {
		t.Errorf("not a zip: %v", err)
	}
}

func TestLimits(t *testing.T) {
	// Too many entries.
	var many [][2]string
	for i := 0; i <= MaxEntries; i++ {
		many = append(many, [2]string{"assets/f" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26)), "x"})
	}
	if _, err := Read(rawZip(t, many...)); err == nil || !strings.Contains(err.Error(), "entries") {
		t.Errorf("too many entries: %v", err)
	}
	// One entry larger than the limit: 17 MiB of zeros compress to a few
	// KiB, so the header and the reader must both stop it.
	b, _ := signed(t)
	big := append(entriesOf(t, b), [2]string{"assets/big", strings.Repeat("\x00", MaxEntryBytes+1)})
	if _, err := Read(rawZip(t, big...)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("large entry: %v", err)
	}
}

func TestAuditFindings(t *testing.T) {
	manifest := strings.Replace(goodManifest, `http_hosts = ["api.example.com"]`, `http_hosts = ["*.example.com", "com", "co.uk", "github.io"]`+"\nsecrets = [\"*\"]", 1)
	manifest = strings.Replace(manifest, `kv_prefix = "echo/"`, `kv_prefix = "/"`, 1)
	p, err := FromDir(skillDir(t, manifest, fsModule))
	must(t, err)
	var got []string
	for _, f := range p.Audit() {
		got = append(got, f.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"wildcard", "top-level domain", `"co.uk" is a public suffix`, `"github.io" is a public suffix`, "every secret", "whole key-value store", "path_open"} {
		if !strings.Contains(all, want) {
			t.Errorf("audit findings lack %q:\n%s", want, all)
		}
	}
	p, err = FromDir(skillDir(t, goodManifest, []byte("\x00asm\x02\x00\x00\x00")))
	must(t, err)
	if f := p.Audit(); len(f) != 1 || f[0].Check != "module_format" {
		t.Errorf("a module of another version: %v", f)
	}
}

func TestFromDirRefusesStrayFiles(t *testing.T) {
	dir := skillDir(t, goodManifest, emptyModule)
	must(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644))
	if _, err := FromDir(dir); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("stray file: %v", err)
	}
}

func TestKeys(t *testing.T) {
	pub, pemKey, err := GenerateKey()
	must(t, err)
	priv, err := ParsePrivateKey(pemKey)
	must(t, err)
	if !priv.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatal("the key read back does not match")
	}
	got, err := ParsePublicKey(FormatPublicKey(pub))
	must(t, err)
	if !got.Equal(pub) {
		t.Fatal("public key round trip")
	}
	for _, bad := range []string{"", "ed25519:", "rsa:AAAA", "ed25519:!!!"} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("ParsePublicKey(%q) succeeded", bad)
		}
	}
	if _, err := ParsePrivateKey([]byte("garbage")); err == nil || !strings.Contains(err.Error(), "keygen") {
		t.Errorf("garbage key: %v", err)
	}
}

func TestDescribeSchemaError(t *testing.T) {
	sch, err := CompileSchema(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
	must(t, err)
	verr := sch.Validate(map[string]any{"text": 5.0})
	if verr == nil {
		t.Fatal("a number validated as a string")
	}
	got := DescribeSchemaError(verr)
	if strings.Contains(got, "urn:") || !strings.Contains(got, "/text") || !strings.Contains(got, "want string") {
		t.Fatalf("described as %q", got)
	}
}

// A tool may narrow the skill's capabilities; without its own table it
// has the skill's.
func TestToolCapabilitiesNarrowTheSkills(t *testing.T) {
	m, err := ParseManifest([]byte(goodManifest))
	if err != nil || m.Tools[0].Capabilities != nil {
		t.Fatalf("no tool table: %v %+v", err, m.Tools[0].Capabilities)
	}
	m, err = ParseManifest([]byte(goodManifest + "[tools.capabilities]\nhttp_hosts = [\"api.example.com\"]\nkv_prefix = \"echo/sub/\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Tools[0].Capabilities; c == nil || len(c.HTTPHosts) != 1 || c.KVPrefix != "echo/sub/" {
		t.Fatalf("narrowed: %+v", c)
	}
	m, err = ParseManifest([]byte(goodManifest + "[tools.capabilities]\n"))
	if c := m.Tools[0].Capabilities; err != nil || c == nil || len(c.HTTPHosts)+len(c.Secrets) != 0 || c.KVPrefix != "" {
		t.Fatalf("an empty table (a pure tool): %v %+v", err, c)
	}
}

// An empty tool table (a pure tool) is empty lists in JSON, not null.
func TestToolCapabilitiesJSON(t *testing.T) {
	b, err := json.Marshal(ToolCapabilities{})
	if err != nil || string(b) != `{"http_hosts":[],"secrets":[]}` {
		t.Fatalf("%s %v", b, err)
	}
}

// A skill id is PUBLISHER.NAME, NAME without a dot: an id that reads as
// another publisher's is refused ("acme.tools.x" could be publisher
// "acme.tools"'s).
func TestSkillIDsAreInThePublishersNamespace(t *testing.T) {
	for id, ok := range map[string]bool{
		"acme.echo": true, "example.echo": false, "acmecorp.echo": false, "acme": false, "acme.": false,
		"acme.tools.fetch": false, "echo": false,
	} {
		m, err := ParseManifest([]byte(strings.Replace(goodManifest, `skill_id = "acme.echo"`, `skill_id = "`+id+`"`, 1)))
		if err != nil {
			if !ok {
				continue // refused on its own already (not an id)
			}
			t.Fatalf("%s: %v", id, err)
		}
		if err := m.CheckNamespace(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), `not in publisher "acme"'s namespace`)) {
			t.Errorf("%s: %v, want allowed %v", id, err, ok)
		}
	}
	dotted, _ := ParseManifest([]byte(strings.Replace(strings.Replace(goodManifest, `skill_id = "acme.echo"`, `skill_id = "acme.tools.echo"`, 1), `publisher = "acme"`, `publisher = "acme.tools"`, 1)))
	if err := dotted.CheckNamespace(); err != nil {
		t.Errorf("publisher acme.tools naming acme.tools.echo: %v", err)
	}
}
