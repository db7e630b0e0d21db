package skill

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Package limits (the reference's): the sum of the entries' sizes, one
// entry, and the number of entries.
const (
	MaxPackageBytes = 64 << 20
	MaxEntryBytes   = 16 << 20
	MaxEntries      = 256
)

// File names inside a package.
const (
	ManifestFile  = "skill.toml"
	SumsFile      = "SHA256SUMS"
	SignatureFile = "signature.json"
	FileExt       = ".palyra-skill"
)

// Package is a skill package read and checked by Read: its manifest and
// entries, and the signature it carries (checked by Verify, not by Read).
type Package struct {
	Manifest  *Manifest
	Entries   map[string][]byte // every entry but signature.json, by path
	Signature *Signature        // nil when unsigned
}

// ErrCorrupt wraps every refusal of a package's bytes or structure.
var ErrCorrupt = errors.New("invalid skill package")

func corrupt(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
}

// checkPath refuses entry paths that could escape a directory or mean
// different files on different systems.
func checkPath(p string) error {
	switch {
	case p == "" || len(p) > 255:
		return fmt.Errorf("entry path %q: empty or longer than 255 bytes", p)
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, "\\"):
		return fmt.Errorf("entry path %q is absolute", p)
	case strings.Contains(p, ":"):
		return fmt.Errorf("entry path %q contains ':'", p)
	case strings.Contains(p, "\\"):
		return fmt.Errorf("entry path %q contains '\\'", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("entry path %q contains '..'", p)
	case path.Clean(p) != p:
		return fmt.Errorf("entry path %q is not clean (want %q)", p, path.Clean(p))
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("entry path %q contains a control character", p)
		}
	}
	return nil
}

// allowedEntry reports whether a package may hold p.
func allowedEntry(p string) bool {
	switch {
	case p == ManifestFile, p == SumsFile, p == SignatureFile:
		return true
	case strings.HasPrefix(p, "modules/"):
		return moduleRE.MatchString(p)
	case strings.HasPrefix(p, "assets/"):
		return len(p) > len("assets/")
	}
	return false
}

// Read parses a package and checks its structure: the limits, entry paths,
// the manifest, that every tool's module is present, and that SHA256SUMS
// lists exactly the entries with their hashes. It does not check the
// signature (see Verify) or audit the modules.
func Read(data []byte) (*Package, error) {
	if len(data) > MaxPackageBytes+1<<20 {
		return nil, corrupt("the file is %d bytes; a package holds at most %d MiB", len(data), MaxPackageBytes>>20)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, corrupt("not a ZIP archive (%v); make one with 'palyra skill pack DIR'", err)
	}
	if len(zr.File) > MaxEntries {
		return nil, corrupt("%d entries; the limit is %d", len(zr.File), MaxEntries)
	}
	p := &Package{Entries: map[string][]byte{}}
	var total int64
	var sig []byte
	for _, f := range zr.File {
		name := f.Name
		if strings.HasSuffix(name, "/") && f.UncompressedSize64 == 0 {
			if err := checkPath(strings.TrimSuffix(name, "/")); err != nil {
				return nil, corrupt("%v", err)
			}
			continue // a directory entry
		}
		if err := checkPath(name); err != nil {
			return nil, corrupt("%v", err)
		}
		if !allowedEntry(name) {
			return nil, corrupt("unexpected entry %q: a package holds skill.toml, SHA256SUMS, signature.json, modules/*.wasm and assets/", name)
		}
		if f.Mode()&fs.ModeSymlink != 0 || !f.Mode().IsRegular() && f.Mode().Type() != 0 {
			return nil, corrupt("entry %q is not a regular file", name)
		}
		if _, dup := p.Entries[name]; dup || (name == SignatureFile && sig != nil) {
			return nil, corrupt("entry %q appears twice", name)
		}
		if f.UncompressedSize64 > MaxEntryBytes {
			return nil, corrupt("entry %q is %d bytes; the limit is %d MiB", name, f.UncompressedSize64, MaxEntryBytes>>20)
		}
		b, err := readEntry(f)
		if err != nil {
			return nil, corrupt("entry %q: %v", name, err)
		}
		total += int64(len(b))
		if total > MaxPackageBytes {
			return nil, corrupt("the entries hold more than %d MiB", MaxPackageBytes>>20)
		}
		if name == SignatureFile {
			sig = b
			continue
		}
		p.Entries[name] = b
	}
	mb, ok := p.Entries[ManifestFile]
	if !ok {
		return nil, corrupt("no %s", ManifestFile)
	}
	if p.Manifest, err = ParseManifest(mb); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	modules := 0
	for name := range p.Entries {
		if strings.HasPrefix(name, "modules/") {
			modules++
		}
	}
	if modules == 0 {
		return nil, corrupt("no modules/*.wasm")
	}
	for _, t := range p.Manifest.Tools {
		if _, ok := p.Entries[t.Module]; !ok {
			return nil, corrupt("tool %q names module %s, which the package does not hold", t.ID, t.Module)
		}
	}
	if err := p.checkSums(); err != nil {
		return nil, err
	}
	if sig != nil {
		if p.Signature, err = parseSignature(sig); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// readEntry reads one entry, never more than MaxEntryBytes whatever its
// header claims.
func readEntry(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxEntryBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxEntryBytes {
		return nil, fmt.Errorf("more than %d MiB", MaxEntryBytes>>20)
	}
	return b, nil
}

// sums renders SHA256SUMS for entries (every entry but the sums file and
// the signature), sorted by path.
func sums(entries map[string][]byte) []byte {
	var b strings.Builder
	for _, name := range sortedNames(entries) {
		if name == SumsFile {
			continue
		}
		h := sha256.Sum256(entries[name])
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h[:]), name)
	}
	return []byte(b.String())
}

// checkSums compares SHA256SUMS with the entries.
func (p *Package) checkSums() error {
	got, ok := p.Entries[SumsFile]
	if !ok {
		return corrupt("no %s (the per-file sha256 list); pack with 'palyra skill pack'", SumsFile)
	}
	want := sums(p.Entries)
	if bytes.Equal(got, want) {
		return nil
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(got), "\n"), "\n") {
		h, name, ok := strings.Cut(line, "  ")
		if !ok {
			return corrupt("%s: malformed line %q", SumsFile, line)
		}
		listed[name] = h
	}
	for _, name := range sortedNames(p.Entries) {
		if name == SumsFile {
			continue
		}
		h := sha256.Sum256(p.Entries[name])
		switch lh, ok := listed[name]; {
		case !ok:
			return corrupt("%s does not list %s", SumsFile, name)
		case lh != hex.EncodeToString(h[:]):
			return corrupt("%s: sha256 of %s is %x, the list says %s (the file was altered)", SumsFile, name, h, lh)
		}
		delete(listed, name)
	}
	for name := range listed {
		return corrupt("%s lists %s, which the package does not hold", SumsFile, name)
	}
	return corrupt("%s is not in canonical form", SumsFile)
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Bytes writes p as a package (ZIP), entries sorted by path with fixed
// times, so the same contents always give the same bytes. SHA256SUMS is
// written from the entries; signature.json is included when p is signed.
func (p *Package) Bytes() ([]byte, error) {
	entries := map[string][]byte{}
	for n, b := range p.Entries {
		entries[n] = b
	}
	entries[SumsFile] = sums(p.Entries)
	if p.Signature != nil {
		b, err := p.Signature.marshal()
		if err != nil {
			return nil, err
		}
		entries[SignatureFile] = b
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	epoch := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range sortedNames(entries) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: epoch})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(entries[name]); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// FromDir builds an unsigned package from a directory holding skill.toml,
// modules/ and optionally assets/. Anything else in the directory is an
// error (so nothing is left out, or put in, by surprise), except
// SHA256SUMS and signature.json, which are made anew.
func FromDir(dir string) (*Package, error) {
	entries := map[string][]byte{}
	var total int64
	err := filepath.WalkDir(dir, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, fp)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			if rel != "modules" && rel != "assets" && !strings.HasPrefix(rel, "assets/") {
				return fmt.Errorf("%s: unexpected directory (a skill holds skill.toml, modules/ and assets/)", rel)
			}
			return nil
		}
		if rel == SumsFile || rel == SignatureFile {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", rel)
		}
		if err := checkPath(rel); err != nil {
			return err
		}
		if !allowedEntry(rel) {
			return fmt.Errorf("%s: unexpected file (a skill holds skill.toml, modules/*.wasm and assets/)", rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > MaxEntryBytes {
			return fmt.Errorf("%s is %d bytes; the limit per file is %d MiB", rel, info.Size(), MaxEntryBytes>>20)
		}
		if total += info.Size(); total > MaxPackageBytes {
			return fmt.Errorf("the files hold more than %d MiB, the limit for a package", MaxPackageBytes>>20)
		}
		b, err := os.ReadFile(fp)
		if err != nil {
			return err
		}
		entries[rel] = b
		if len(entries) > MaxEntries-2 {
			return fmt.Errorf("more than %d files", MaxEntries-2)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("packing %s: %w", dir, err)
	}
	p := &Package{Entries: entries}
	data, err := p.Bytes()
	if err != nil {
		return nil, err
	}
	if p, err = Read(data); err != nil { // the same checks as any package
		return nil, err
	}
	if err := p.Manifest.CheckNamespace(); err != nil { // a new package's id
		return nil, fmt.Errorf("skill.toml: %w", err)
	}
	return p, nil
}

// Hash is the sha256 of a package file's bytes (how a registry names it).
func Hash(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}
