package skill

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// Audit limits (the reference's).
const (
	MaxModuleBytes = 8 << 20
	MaxExports     = 128
)

// Finding is one reason an audit failed.
type Finding struct {
	Check  string `json:"check"` // module_size, module_format, exports, wasi_filesystem, capability
	Path   string `json:"path,omitempty"`
	Reason string `json:"reason"`
}

func (f Finding) String() string {
	if f.Path != "" {
		return fmt.Sprintf("%s: %s: %s", f.Check, f.Path, f.Reason)
	}
	return fmt.Sprintf("%s: %s", f.Check, f.Reason)
}

// wasiFilesystem are the WASI preview 1 calls that open, list or change
// files by path. A Palyra run has no filesystem to give, so a module that
// imports them was built to read or write files it will not get. The
// preopen discovery calls (fd_prestat_get, fd_prestat_dir_name) are not
// listed: every Go and wasi-libc program imports them at start-up, and
// they only learn that no directory is open.
var wasiFilesystem = []string{
	"path_open", "path_create_directory", "path_remove_directory", "path_unlink_file",
	"path_rename", "path_symlink", "path_link", "path_readlink", "path_filestat_get",
	"path_filestat_set_times", "fd_readdir",
}

// Audit checks what Read does not: each module's size, that it is a
// WebAssembly binary, its export count and WASI filesystem imports, and
// capabilities that grant too much (wildcards, every secret, the whole
// key-value store). A non-empty result means the skill is quarantined at
// install. Full validation of the modules (the wasm runtime compiling
// them) happens on the node that installs the package.
func (p *Package) Audit() []Finding {
	var out []Finding
	for _, name := range sortedNames(p.Entries) {
		if !strings.HasPrefix(name, "modules/") {
			continue
		}
		b := p.Entries[name]
		if len(b) > MaxModuleBytes {
			out = append(out, Finding{"module_size", name, fmt.Sprintf("%d bytes; the limit is %d MiB", len(b), MaxModuleBytes>>20)})
			continue
		}
		info, err := scanModule(b)
		if err != nil {
			out = append(out, Finding{"module_format", name, err.Error()})
			continue
		}
		if info.exports > MaxExports {
			out = append(out, Finding{"exports", name, fmt.Sprintf("%d exports; the limit is %d", info.exports, MaxExports)})
		}
		for _, imp := range info.imports {
			mod, field, _ := strings.Cut(imp, ".")
			if strings.HasPrefix(mod, "wasi") && slices.Contains(wasiFilesystem, field) {
				out = append(out, Finding{"wasi_filesystem", name, fmt.Sprintf("imports %s (filesystem access; a Palyra run has no filesystem)", imp)})
			}
		}
	}
	c := p.Manifest.Capabilities
	for _, h := range c.HTTPHosts {
		switch {
		case strings.Contains(h, "*"):
			out = append(out, Finding{"capability", "", fmt.Sprintf("http_hosts %q is a wildcard; list each host (a host admits its subdomains)", h)})
		case !isIP(h) && !strings.Contains(strings.Trim(h, "."), "."):
			out = append(out, Finding{"capability", "", fmt.Sprintf("http_hosts %q is a whole top-level domain", h)})
		case !isIP(h) && isPublicSuffix(h):
			// As a job's --allow-host is refused: co.uk or github.io admits
			// every site under it.
			out = append(out, Finding{"capability", "", fmt.Sprintf("http_hosts %q is a public suffix: it admits every site under it", h)})
		}
	}
	for _, s := range c.Secrets {
		if s == "*" {
			out = append(out, Finding{"capability", "", "secrets \"*\" asks for every secret; name each one"})
		}
	}
	if c.KVPrefix == "/" || c.KVPrefix == "*" {
		out = append(out, Finding{"capability", "", fmt.Sprintf("kv_prefix %q is the whole key-value store; use a prefix of the skill's own, such as %q", c.KVPrefix, p.Manifest.SkillID+"/")})
	}
	return out
}

// moduleInfo is what the audit reads of a module.
type moduleInfo struct {
	imports []string // "module.field"
	exports int
}

// scanModule reads a WebAssembly binary's section headers, its imports
// and its export count. Every length is checked against the bytes left
// before it is used.
func scanModule(b []byte) (moduleInfo, error) {
	var info moduleInfo
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return info, errors.New("not a WebAssembly binary (no \\0asm header)")
	}
	if binary.LittleEndian.Uint32(b[4:8]) != 1 {
		return info, fmt.Errorf("WebAssembly binary version %d; want 1", binary.LittleEndian.Uint32(b[4:8]))
	}
	r := &reader{b: b[8:]}
	for !r.done() {
		id, err := r.byte()
		if err != nil {
			return info, err
		}
		size, err := r.u32()
		if err != nil {
			return info, err
		}
		body, err := r.take(int(size))
		if err != nil {
			return info, fmt.Errorf("section %d: %w", id, err)
		}
		switch id {
		case 2: // imports
			if info.imports, err = scanImports(&reader{b: body}); err != nil {
				return info, fmt.Errorf("import section: %w", err)
			}
		case 7: // exports
			n, err := (&reader{b: body}).u32()
			if err != nil {
				return info, fmt.Errorf("export section: %w", err)
			}
			info.exports = int(n)
		}
	}
	return info, nil
}

func scanImports(r *reader) ([]string, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	if int(n) > len(r.b) { // each import takes at least one byte
		return nil, fmt.Errorf("%d imports in %d bytes", n, len(r.b))
	}
	var out []string
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return nil, err
		}
		field, err := r.name()
		if err != nil {
			return nil, err
		}
		kind, err := r.byte()
		if err != nil {
			return nil, err
		}
		switch kind {
		case 0: // func: type index
			_, err = r.u32()
		case 1: // table: reftype, limits
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case 2: // memory: limits
			err = r.limits()
		case 3: // global: valtype, mutability
			_, err = r.take(2)
		case 4: // tag: attribute, type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			err = fmt.Errorf("import %s.%s: unknown kind %d", mod, field, kind)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, mod+"."+field)
	}
	return out, nil
}

type reader struct{ b []byte }

var errShort = errors.New("unexpected end of the module")

func (r *reader) done() bool { return len(r.b) == 0 }

func (r *reader) byte() (byte, error) {
	if len(r.b) == 0 {
		return 0, errShort
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b) {
		return nil, errShort
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s, nil
}

// u32 reads an unsigned LEB128 of at most 5 bytes.
func (r *reader) u32() (uint32, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if i == 4 && c > 0x0f {
			return 0, errors.New("malformed LEB128 integer")
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errors.New("malformed LEB128 integer")
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.take(int(n))
	return string(b), err
}

func (r *reader) limits() error {
	flag, err := r.byte()
	if err != nil {
		return err
	}
	if _, err := r.u32(); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = r.u32()
	}
	return err
}

// isPublicSuffix reports whether host is a listed public suffix: an
// ICANN one (co.uk) or a private one with a dot (github.io), as the API
// refuses for a job's --allow-host.
func isPublicSuffix(host string) bool {
	h := strings.ToLower(strings.Trim(host, "."))
	suffix, icann := publicsuffix.PublicSuffix(h)
	return suffix == h && (icann || strings.Contains(h, "."))
}
