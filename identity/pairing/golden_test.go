package pairing

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/palyra-mesh/palyra/identity"
)

// TestGoldenCode pins the version-1 format, pin and hash (values computed
// independently with Python's hmac/hashlib): codes already handed out and
// records already in Raft must keep meaning the same thing.
func TestGoldenCode(t *testing.T) {
	secret := [SecretLen]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	root := []byte("golden root")
	pin := pinFor(secret, sha256.Sum256(root))
	if pin != 0x2a11f8e {
		t.Fatalf("pin = %#x, want 0x2a11f8e", pin)
	}
	c := Code{kind: identity.KindDevice, id: 0x123456, secret: secret, pin: pin}
	const golden = "P1-H4D2P-04HMA-SW9NF-6YZA2-7WEXS"
	if got := c.String(); got != golden {
		t.Fatalf("String() = %q, want %q", got, golden)
	}
	back, err := Parse(golden)
	if err != nil || back != c {
		t.Fatalf("Parse(%q) = %+v, %v; want %+v", golden, back, err, c)
	}
	if !back.PinMatches(root) || back.IDString() != "H4D2P" {
		t.Fatalf("golden code: pin match %v, ID %q", back.PinMatches(root), back.IDString())
	}
	if got := hex.EncodeToString(back.SecretHash()); got != "16cccae59068b840fe23c6516dfbb4eb52a085e1f1a52ee2663a5412f555017c" {
		t.Fatalf("SecretHash = %s", got)
	}
}
