package pairing

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/palyra-mesh/palyra/identity"
)

// Sizes of a code's fields. See DESIGN.md for why these are enough.
const (
	// IDBits is the size of the random public ID (the kind bit comes on top).
	IDBits = 24
	// SecretLen is the size of the secret in bytes (64 bits).
	SecretLen = 8
	// PinBits is the size of the pin, a MAC of the CA fingerprint.
	PinBits = 26
)

// Labels separate the hashes and MACs made from one secret.
const (
	secretHashLabel = "palyra-pair-secret-v1\x00"
	pinLabel        = "palyra-pair-pin-v1\x00"
)

// Code is a one-time pairing code: who may join (node or device), a public
// ID naming the code's record, a secret the cluster checks, and a pin that
// lets the joiner recognise the cluster's CA before it sends the secret.
//
// String returns the whole code, secret included, for showing to the user
// once; logging a Code with slog shows only its ID and kind. The zero Code is
// not a valid code: make one with New or Parse.
type Code struct {
	kind   identity.Kind
	id     uint32 // IDBits wide
	secret [SecretLen]byte
	pin    uint32 // PinBits wide
}

// New makes a code for a principal of kind that pins the CA whose
// fingerprint is caFingerprintHex (CA.Fingerprint(): SHA-256 of the root's
// DER in hex; colons and upper case are accepted).
func New(kind identity.Kind, caFingerprintHex string) (Code, error) {
	if !kind.Valid() {
		return Code{}, fmt.Errorf("pairing code for unknown kind %q: use %q or %q", kind, identity.KindNode, identity.KindDevice)
	}
	fp, err := parseFingerprint(caFingerprintHex)
	if err != nil {
		return Code{}, err
	}
	var idb [4]byte
	c := Code{kind: kind}
	// crypto/rand.Read never returns an error (it crashes the program if
	// the system's generator fails).
	_, _ = rand.Read(idb[:])
	_, _ = rand.Read(c.secret[:])
	c.id = binary.BigEndian.Uint32(idb[:]) >> (32 - IDBits)
	c.pin = pinFor(c.secret, fp)
	return c, nil
}

// parseFingerprint reads a hex SHA-256 fingerprint.
func parseFingerprint(s string) ([sha256.Size]byte, error) {
	var fp [sha256.Size]byte
	clean := strings.ReplaceAll(strings.TrimSpace(s), ":", "")
	b, err := hex.DecodeString(clean)
	if err != nil || len(b) != sha256.Size {
		return fp, fmt.Errorf("%w %q: want the 64 hex digits of the root's SHA-256 (CA.Fingerprint())", ErrBadFingerprint, s)
	}
	copy(fp[:], b)
	return fp, nil
}

// pinFor is the pin of the CA with fingerprint fp under secret: the first
// PinBits of HMAC-SHA256(secret, label || fp). Keying it by the secret means
// nobody without the code can search for a CA that matches it.
func pinFor(secret [SecretLen]byte, fp [sha256.Size]byte) uint32 {
	mac := hmac.New(sha256.New, secret[:])
	mac.Write([]byte(pinLabel))
	mac.Write(fp[:])
	sum := mac.Sum(nil)
	return binary.BigEndian.Uint32(sum[:4]) >> (32 - PinBits)
}

// Kind says whether the code pairs a node or a device.
func (c Code) Kind() identity.Kind { return c.kind }

// Secret returns a copy of the secret, which the joiner sends to the
// cluster inside a TLS session made with PinnedClientTLS.
func (c Code) Secret() []byte { return append([]byte(nil), c.secret[:]...) }

// SecretHash returns SecretHash(c.Secret()), what the cluster stores.
func (c Code) SecretHash() []byte { return SecretHash(c.secret[:]) }

// PinMatches reports whether rootDER (a CA certificate, DER) is the CA the
// code was made for.
func (c Code) PinMatches(rootDER []byte) bool {
	got := pinFor(c.secret, sha256.Sum256(rootDER))
	return subtle.ConstantTimeEq(int32(got), int32(c.pin)) == 1
}

// LogValue keeps the secret out of logs: a Code logs as its ID and kind.
func (c Code) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", c.IDString()), slog.String("kind", string(c.kind)))
}

// SecretHash is the one-way hash of a code's secret that the cluster stores
// and Check compares against: SHA-256 over a label and the secret.
func SecretHash(secret []byte) []byte {
	h := sha256.New()
	h.Write([]byte(secretHashLabel))
	h.Write(secret)
	return h.Sum(nil)
}
