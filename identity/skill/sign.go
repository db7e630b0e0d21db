package skill

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// SignatureFormat names the signature scheme (and is the digest's domain
// separator).
const SignatureFormat = "palyra-skill-signature-v1"

// Signature is signature.json.
type Signature struct {
	Format    string `json:"format"`
	Algorithm string `json:"algorithm"`
	Publisher string `json:"publisher"`
	PublicKey string `json:"public_key"` // "ed25519:" + base64
	Signature string `json:"signature"`  // base64
}

// Errors Verify returns (wrapped, with details).
var (
	ErrUnsigned     = errors.New("the package is not signed")
	ErrBadSignature = errors.New("the signature does not verify")
	ErrKeyMismatch  = errors.New("the package is signed with another key than the publisher's trusted key")
)

func parseSignature(b []byte) (*Signature, error) {
	var s Signature
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, corrupt("%s: %v", SignatureFile, err)
	}
	if s.Format != SignatureFormat || s.Algorithm != "ed25519" {
		return nil, corrupt("%s: format %q, algorithm %q; this build reads %q with ed25519", SignatureFile, s.Format, s.Algorithm, SignatureFormat)
	}
	return &s, nil
}

func (s *Signature) marshal() ([]byte, error) {
	return json.MarshalIndent(s, "", "  ")
}

// Digest is what a package's signature signs: sha256 over the format name
// and every entry but signature.json, sorted by path, each as its path and
// its contents, both length-prefixed (so no two packages share a digest by
// moving bytes between names and contents).
func (p *Package) Digest() [32]byte {
	h := sha256.New()
	h.Write([]byte(SignatureFormat))
	h.Write([]byte{0})
	var n [8]byte
	for _, name := range sortedNames(p.Entries) {
		binary.BigEndian.PutUint64(n[:], uint64(len(name)))
		h.Write(n[:])
		h.Write([]byte(name))
		binary.BigEndian.PutUint64(n[:], uint64(len(p.Entries[name])))
		h.Write(n[:])
		h.Write(p.Entries[name])
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// Sign signs p as its manifest's publisher with key (replacing any earlier
// signature).
func (p *Package) Sign(key ed25519.PrivateKey) {
	p.Entries[SumsFile] = sums(p.Entries)
	d := p.Digest()
	p.Signature = &Signature{
		Format:    SignatureFormat,
		Algorithm: "ed25519",
		Publisher: p.Manifest.Publisher,
		PublicKey: FormatPublicKey(key.Public().(ed25519.PublicKey)),
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, d[:])),
	}
}

// Verify checks p's signature: made by the key it names, over every
// entry, by the manifest's publisher. With trusted set, the key must be it
// (ErrKeyMismatch otherwise). It returns the signing key.
func (p *Package) Verify(trusted ed25519.PublicKey) (ed25519.PublicKey, error) {
	s := p.Signature
	if s == nil {
		return nil, fmt.Errorf("%w; sign it with 'palyra skill sign FILE --key KEY'", ErrUnsigned)
	}
	if s.Publisher != p.Manifest.Publisher {
		return nil, fmt.Errorf("%w: signed as publisher %q, the manifest says %q", ErrBadSignature, s.Publisher, p.Manifest.Publisher)
	}
	pub, err := ParsePublicKey(s.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	sig, err := base64.StdEncoding.DecodeString(s.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: the signature is not %d bytes of base64", ErrBadSignature, ed25519.SignatureSize)
	}
	if trusted != nil && !trusted.Equal(pub) {
		return nil, fmt.Errorf("%w: publisher %q is trusted with key %s, the package is signed with %s",
			ErrKeyMismatch, s.Publisher, FormatPublicKey(trusted), s.PublicKey)
	}
	d := p.Digest()
	if !ed25519.Verify(pub, d[:], sig) {
		return nil, fmt.Errorf("%w: the package's contents changed after signing, or the signature was forged", ErrBadSignature)
	}
	return pub, nil
}

// FormatPublicKey renders a publisher key as "ed25519:BASE64".
func FormatPublicKey(k ed25519.PublicKey) string {
	return "ed25519:" + base64.StdEncoding.EncodeToString(k)
}

// ParsePublicKey reads "ed25519:BASE64".
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(s), "ed25519:")
	if !ok {
		return nil, fmt.Errorf("publisher key %q: want ed25519:BASE64 (as 'palyra skill keygen' prints)", truncate(s, 64))
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("publisher key %q: not %d bytes of base64", truncate(s, 64), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// GenerateKey makes a publisher key pair; the private key as PEM (PKCS #8).
func GenerateKey() (ed25519.PublicKey, []byte, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pub, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKey reads a PEM private key written by GenerateKey.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM private key (make one with 'palyra skill keygen')")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("reading the private key: %w", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the private key is %T; a publisher key is Ed25519", k)
	}
	return ek, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
