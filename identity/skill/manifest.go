package skill

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/mod/semver"
)

// ManifestVersion is the only skill.toml format this build reads.
const ManifestVersion = 1

// Manifest is a skill's skill.toml.
type Manifest struct {
	ManifestVersion int    `toml:"manifest_version" json:"manifest_version"`
	SkillID         string `toml:"skill_id" json:"skill_id"`
	Name            string `toml:"name" json:"name"`
	Version         string `toml:"version" json:"version"`
	Publisher       string `toml:"publisher" json:"publisher"`
	Description     string `toml:"description" json:"description,omitempty"`

	Capabilities Capabilities `toml:"capabilities" json:"capabilities"`
	Tools        []Tool       `toml:"tools" json:"tools"`
}

// Capabilities is the most a skill's tools may be granted. What a run gets
// is this intersected with what the operator's policy allows.
type Capabilities struct {
	// HTTPHosts the tools may call (exact hosts or their subdomains; no
	// wildcards).
	HTTPHosts []string `toml:"http_hosts" json:"http_hosts,omitempty"`
	// AllowPrivate lets those hosts resolve to private and loopback
	// addresses (an intranet service); off, they are refused after DNS.
	AllowPrivate bool `toml:"allow_private" json:"allow_private,omitempty"`
	// Secrets by name.
	Secrets []string `toml:"secrets" json:"secrets,omitempty"`
	// KVPrefix the tools may read and write under; empty means no KV.
	KVPrefix string `toml:"kv_prefix" json:"kv_prefix,omitempty"`
	// Quotas per run; zero takes the cluster's defaults.
	Fuel        uint64 `toml:"fuel" json:"fuel,omitempty"`
	MemoryMiB   uint64 `toml:"memory_mib" json:"memory_mib,omitempty"`
	WallClockMS int64  `toml:"wall_clock_ms" json:"wall_clock_ms,omitempty"`
}

// Tool is one callable entry point of a skill: a wasm module run as a job
// with the tool's input on stdin and its output on stdout.
type Tool struct {
	ID          string `toml:"id" json:"id"`
	Name        string `toml:"name" json:"name"`
	Description string `toml:"description" json:"description,omitempty"`
	// Module is the package path of the tool's module, "modules/NAME.wasm".
	Module string `toml:"module" json:"module"`
	// InputSchema and OutputSchema are JSON Schema documents (as JSON
	// text) the run's input and output must satisfy.
	InputSchema  string `toml:"input_schema" json:"input_schema"`
	OutputSchema string `toml:"output_schema" json:"output_schema"`
	// RequiresApproval: a run waits for a person's approval.
	RequiresApproval bool `toml:"requires_approval" json:"requires_approval,omitempty"`
	// DefaultSensitive: the tool's output is treated as sensitive.
	DefaultSensitive bool `toml:"default_sensitive" json:"default_sensitive,omitempty"`
	// Deterministic runs the tool on a virtual clock with seeded randomness.
	Deterministic bool `toml:"deterministic" json:"deterministic,omitempty"`
	// Capabilities, when the tool has its own [tools.capabilities] table,
	// are what its runs ask for instead of the skill's: a subset of them
	// (an empty table: none, for a pure tool). Quotas stay the skill's.
	Capabilities *ToolCapabilities `toml:"capabilities" json:"capabilities,omitempty"`
}

// ToolCapabilities narrow the skill's capabilities for one tool, so that
// running a pure tool of a skill that also fetches does not need the
// grants the fetching one needs.
type ToolCapabilities struct {
	HTTPHosts    []string `toml:"http_hosts" json:"http_hosts"`
	AllowPrivate bool     `toml:"allow_private" json:"allow_private,omitempty"`
	Secrets      []string `toml:"secrets" json:"secrets"`
	KVPrefix     string   `toml:"kv_prefix" json:"kv_prefix,omitempty"`
}

// MarshalJSON writes empty lists as [], not null: an empty table (a pure
// tool) read as "unknown" otherwise.
func (tc ToolCapabilities) MarshalJSON() ([]byte, error) {
	type plain ToolCapabilities
	p := plain(tc)
	if p.HTTPHosts == nil {
		p.HTTPHosts = []string{}
	}
	if p.Secrets == nil {
		p.Secrets = []string{}
	}
	return json.Marshal(p)
}

// validate checks that tc asks for nothing the skill's capabilities c do
// not declare; where names the tool.
func (tc *ToolCapabilities) validate(c Capabilities, where string) []error {
	var errs []error
	for _, h := range tc.HTTPHosts {
		if !slices.Contains(c.HTTPHosts, h) {
			errs = append(errs, fmt.Errorf("%s.capabilities.http_hosts: %q is not in the skill's capabilities.http_hosts %q: a tool's capabilities narrow the skill's", where, h, c.HTTPHosts))
		}
	}
	if tc.AllowPrivate && !c.AllowPrivate {
		errs = append(errs, fmt.Errorf("%s.capabilities.allow_private: the skill's capabilities do not allow private addresses", where))
	}
	for _, n := range tc.Secrets {
		if !slices.Contains(c.Secrets, n) {
			errs = append(errs, fmt.Errorf("%s.capabilities.secrets: %q is not in the skill's capabilities.secrets %q", where, n, c.Secrets))
		}
	}
	if tc.KVPrefix != "" && (c.KVPrefix == "" || !strings.HasPrefix(tc.KVPrefix, c.KVPrefix)) {
		errs = append(errs, fmt.Errorf("%s.capabilities.kv_prefix: %q is not under the skill's capabilities.kv_prefix %q", where, tc.KVPrefix, c.KVPrefix))
	}
	return errs
}

var (
	idRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	versionRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]{1,64})?$`)
	secretRE  = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	moduleRE  = regexp.MustCompile(`^modules/[A-Za-z0-9_.-]{1,128}\.wasm$`)
)

// Bounds on a manifest's contents.
const (
	maxManifestBytes = 1 << 20
	maxTools         = 64
	maxSchemaBytes   = 256 << 10
	maxHosts         = 64
	maxSecrets       = 64
	maxText          = 1024
)

// ParseManifest decodes and checks skill.toml. Unknown fields are refused
// (a misspelt capability must not be silently ignored).
func ParseManifest(data []byte) (*Manifest, error) {
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("skill.toml is %d bytes; the limit is %d", len(data), maxManifestBytes)
	}
	var m Manifest
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&m)
	if err != nil {
		return nil, fmt.Errorf("skill.toml: %w", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("skill.toml: unknown field(s) %s; see 'palyra skill --help' for the fields", strings.Join(keys, ", "))
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// CheckNamespace refuses a skill id outside its publisher's namespace: an
// id is PUBLISHER.NAME, NAME without a dot, so no publisher takes an id
// that reads as another's ("example.tools" from "mallory", or
// "example.tools.fetch" from "example" when "example.tools" publishes
// too). It is asked of new packages (pack) and of ids not installed yet:
// a skill installed under an older id may still be upgraded by its
// publisher.
func (m *Manifest) CheckNamespace() error {
	name, ok := strings.CutPrefix(m.SkillID, m.Publisher+".")
	if !ok || name == "" || strings.Contains(name, ".") {
		n := m.SkillID
		if i := strings.LastIndexByte(n, '.'); i >= 0 {
			n = n[i+1:]
		}
		return fmt.Errorf("skill_id %q is not in publisher %q's namespace: name it %s.NAME (NAME without a dot), e.g. %s.%s", m.SkillID, m.Publisher, m.Publisher, m.Publisher, n)
	}
	return nil
}

// Validate checks every field of m on its own (not against a package's
// files: see Read).
func (m *Manifest) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if m.ManifestVersion != ManifestVersion {
		bad("manifest_version is %d; this build reads %d", m.ManifestVersion, ManifestVersion)
	}
	if !idRE.MatchString(m.SkillID) {
		bad("skill_id %q: want 1-64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", m.SkillID)
	}
	if !idRE.MatchString(m.Publisher) {
		bad("publisher %q: want 1-64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", m.Publisher)
	}
	if !versionRE.MatchString(m.Version) || !semver.IsValid("v"+m.Version) {
		bad("version %q: want MAJOR.MINOR.PATCH with an optional -PRERELEASE, e.g. 1.2.0 or 2.0.0-rc.1 (semantic versioning, without +BUILD metadata: two packages whose versions differ only there would be one version)", m.Version)
	}
	if m.Name == "" || len(m.Name) > maxText {
		bad("name: required, at most %d bytes", maxText)
	}
	if len(m.Description) > 4*maxText {
		bad("description: at most %d bytes", 4*maxText)
	}
	if err := m.Capabilities.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(m.Tools) == 0 || len(m.Tools) > maxTools {
		bad("tools: want 1 to %d [[tools]] tables, got %d", maxTools, len(m.Tools))
	}
	seen := map[string]bool{}
	for i, t := range m.Tools {
		where := fmt.Sprintf("tools[%d]", i)
		if !idRE.MatchString(t.ID) {
			bad("%s.id %q: want 1-64 of a-z, 0-9, '.', '_', '-'", where, t.ID)
		} else if seen[t.ID] {
			bad("%s.id %q: two tools have this id", where, t.ID)
		}
		seen[t.ID] = true
		if t.Name == "" || len(t.Name) > maxText || len(t.Description) > 4*maxText {
			bad("%s.name: required, at most %d bytes (description at most %d)", where, maxText, 4*maxText)
		}
		if !moduleRE.MatchString(t.Module) {
			bad("%s.module %q: want modules/NAME.wasm", where, t.Module)
		}
		for _, s := range []struct{ field, doc string }{{"input_schema", t.InputSchema}, {"output_schema", t.OutputSchema}} {
			if _, err := CompileSchema(s.doc); err != nil {
				bad("%s.%s: %v", where, s.field, err)
			}
		}
		if t.Capabilities != nil {
			errs = append(errs, t.Capabilities.validate(m.Capabilities, where)...)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("skill.toml: %w", errors.Join(errs...))
	}
	return nil
}

func (c *Capabilities) validate() error {
	var errs []error
	if len(c.HTTPHosts) > maxHosts {
		errs = append(errs, fmt.Errorf("capabilities.http_hosts: at most %d", maxHosts))
	}
	for _, h := range c.HTTPHosts {
		if h == "" || len(h) > 253 || strings.ContainsAny(h, "/:@ \t") && !isIP(h) {
			errs = append(errs, fmt.Errorf("capabilities.http_hosts: %q is not a host name or IP address", h))
		}
	}
	if len(c.Secrets) > maxSecrets {
		errs = append(errs, fmt.Errorf("capabilities.secrets: at most %d", maxSecrets))
	}
	for _, s := range c.Secrets {
		if s != "*" && !secretRE.MatchString(s) {
			errs = append(errs, fmt.Errorf("capabilities.secrets: %q: want 1-128 of A-Z, a-z, 0-9, '_', '.', '-'", s))
		}
	}
	if len(c.KVPrefix) > 256 {
		errs = append(errs, errors.New("capabilities.kv_prefix: at most 256 bytes"))
	}
	if c.WallClockMS < 0 {
		errs = append(errs, errors.New("capabilities.wall_clock_ms: must not be negative"))
	}
	return errors.Join(errs...)
}

func isIP(h string) bool {
	_, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil
}

// CompileSchema compiles a JSON Schema document given as JSON text. Only
// the document itself is read: references to other documents are refused
// (nothing is fetched).
func CompileSchema(doc string) (*jsonschema.Schema, error) {
	if strings.TrimSpace(doc) == "" {
		return nil, errors.New("required: a JSON Schema document, e.g. '{\"type\":\"object\"}'")
	}
	if len(doc) > maxSchemaBytes {
		return nil, fmt.Errorf("%d bytes; the limit is %d", len(doc), maxSchemaBytes)
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	const url = "urn:palyra:skill-schema"
	if err := c.AddResource(url, v); err != nil {
		return nil, fmt.Errorf("not a JSON Schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("not a valid JSON Schema: %w", err)
	}
	return s, nil
}

// noLoader refuses every external schema reference.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema references %s: a tool's schema must be self-contained (nothing is fetched)", url)
}

// ValidName reports whether s may be a skill id, tool id or publisher name.
func ValidName(s string) bool { return idRE.MatchString(s) }

// Tool returns the tool with id, or nil.
func (m *Manifest) Tool(id string) *Tool {
	for i := range m.Tools {
		if m.Tools[i].ID == id {
			return &m.Tools[i]
		}
	}
	return nil
}

// DescribeSchemaError renders a JSON Schema validation error as the
// places that failed and why ("at '/text': got number, want string"),
// without the validator's header naming the schema's internal URL.
func DescribeSchemaError(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	if len(lines) > 1 && strings.HasPrefix(lines[0], "jsonschema validation failed") {
		lines = lines[1:]
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(strings.TrimSpace(l), "- ")
	}
	return strings.Join(lines, "; ")
}
