package skill

import (
	"bytes"
	"testing"
)

// FuzzRead: no input makes Read panic or read past its limits, and a
// package it accepts writes back to one it reads the same.
func FuzzRead(f *testing.F) {
	b, _ := signed(f)
	f.Add(b)
	f.Add(rawZip(f, [2]string{ManifestFile, goodManifest}, [2]string{"modules/echo.wasm", string(emptyModule)}))
	f.Add([]byte("PK\x05\x06" + string(make([]byte, 18))))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Read(data)
		if err != nil {
			return
		}
		out, err := p.Bytes()
		if err != nil {
			t.Fatalf("Bytes of a package Read accepted: %v", err)
		}
		q, err := Read(out)
		if err != nil {
			t.Fatalf("Read of what Bytes wrote: %v", err)
		}
		if len(q.Entries) != len(p.Entries) {
			t.Fatalf("%d entries after a round trip, %d before", len(q.Entries), len(p.Entries))
		}
		for n, c := range p.Entries {
			if !bytes.Equal(q.Entries[n], c) {
				t.Fatalf("entry %s changed in a round trip", n)
			}
		}
		if p.Digest() != q.Digest() {
			t.Fatal("the digest changed in a round trip")
		}
		_ = p.Audit()
	})
}

// FuzzParseManifest: no manifest makes the parser panic.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(goodManifest))
	f.Add([]byte("manifest_version = 1\n[[tools]]\nid = \"x\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err == nil && m.Validate() != nil {
			t.Fatal("a parsed manifest does not validate")
		}
	})
}

// FuzzScanModule: the audit's module reader never panics or loops.
func FuzzScanModule(f *testing.F) {
	f.Add(emptyModule)
	f.Add(fsModule)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = scanModule(data)
	})
}
