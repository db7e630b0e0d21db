package node

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The cluster data key seals secrets at rest in the replicated store
// (AES-256-GCM, the secret's name as additional data so a sealed value
// cannot be moved to another name). Every node holds it in its data dir
// (0600); devices never do. A joining node receives it inside the pairing
// TLS session, which it verified against the CA pinned in its code.

const dataKeyLen = 32

// DataKeyFile is where the cluster data key is kept.
func (l Layout) DataKeyFile() string { return filepath.Join(l.Dir, "cluster.key") }

func newDataKey() ([]byte, error) {
	k := make([]byte, dataKeyLen)
	_, err := rand.Read(k)
	return k, err
}

func writeDataKey(l Layout, key []byte) error {
	if len(key) != dataKeyLen {
		return fmt.Errorf("cluster data key must be %d bytes", dataKeyLen)
	}
	return writeFileAtomic(l.DataKeyFile(), key, 0o600)
}

func readDataKey(l Layout) ([]byte, error) {
	k, err := os.ReadFile(l.DataKeyFile())
	if err != nil {
		return nil, fmt.Errorf("read cluster data key: %w (a node data dir needs %s; re-pair the node if it is lost)", err, l.DataKeyFile())
	}
	if len(k) != dataKeyLen {
		return nil, fmt.Errorf("cluster data key %s is %d bytes, want %d", l.DataKeyFile(), len(k), dataKeyLen)
	}
	return k, nil
}

func aead(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// seal encrypts value for secret name.
func seal(key []byte, name string, value []byte) ([]byte, error) {
	g, err := aead(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, g.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return g.Seal(nonce, nonce, value, []byte(name)), nil
}

// unseal decrypts a sealed value of secret name.
func unseal(key []byte, name string, sealed []byte) ([]byte, error) {
	g, err := aead(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < g.NonceSize() {
		return nil, errors.New("sealed secret is truncated")
	}
	v, err := g.Open(nil, sealed[:g.NonceSize()], sealed[g.NonceSize():], []byte(name))
	if err != nil {
		return nil, fmt.Errorf("secret %q does not decrypt with this node's cluster data key", name)
	}
	return v, nil
}
