package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// keyringDirLen is how many hex digits of a root's fingerprint name its
// directory in a keyring.
const keyringDirLen = 16

// Keyring is the cluster CAs whose keys this node holds: one CA per root,
// each in its own directory under dir (dir/FINGERPRINT16/ca.key, ca.crt).
// A CA that InitCA wrote into dir itself is read too. Voters hold the
// keyring; a node that is not a voter holds none (see DESIGN.md). It is safe
// for concurrent use.
type Keyring struct {
	dir  string
	opts []CAOption
	log  *slog.Logger
	mu   sync.RWMutex
	cas  map[string]*CA // by root fingerprint
}

// OpenKeyring loads every CA under dir; a missing dir is an empty keyring.
// A CA directory that cannot be loaded (an import cut short, a damaged
// file) is set aside with a warning: a voter can fetch the key again.
func OpenKeyring(dir string, opts ...CAOption) (*Keyring, error) {
	o := caOptions{logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	k := &Keyring{dir: dir, opts: opts, log: o.logger, cas: map[string]*CA{}}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open CA keyring: %w", err)
	}
	dirs := []string{}
	if _, err := os.Stat(filepath.Join(dir, caCertFile)); err == nil {
		dirs = append(dirs, dir)
	}
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(dir, e.Name()))
		}
	}
	for _, d := range dirs {
		ca, err := LoadCA(d, opts...)
		if err != nil {
			k.log.Warn("ignoring a CA directory that does not load; a voter fetches the key again", "dir", d, "err", err)
			if d != dir {
				_ = os.RemoveAll(d)
			}
			continue
		}
		k.cas[ca.Fingerprint()] = ca
	}
	return k, nil
}

// Get returns the CA of the root with fingerprint fp, or nil.
func (k *Keyring) Get(fp string) *CA {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.cas[fp]
}

// Fingerprints lists the roots whose keys the keyring holds, sorted.
func (k *Keyring) Fingerprints() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]string, 0, len(k.cas))
	for fp := range k.cas {
		out = append(out, fp)
	}
	slices.Sort(out)
	return out
}

// Create makes a new root and key for clusterName and adds them: the start
// of a CA rotation. Its common name carries a random suffix so the roots of
// one cluster can be told apart.
func (k *Keyring) Create(clusterName string) (*CA, error) {
	if err := validClusterName(clusterName); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate root key: %w", err)
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	root, err := newRootCert(key, clusterName, fmt.Sprintf("%s root CA %s", clusterName, hex.EncodeToString(tag[:])))
	if err != nil {
		return nil, err
	}
	return k.add(root, key)
}

// Import adds a CA handed over by another voter: rootDER is its root
// certificate, keyDER its PKCS#8 private key. Both must belong together and
// form an unexpired self-signed P-256 CA. Importing a held root is a no-op.
func (k *Keyring) Import(rootDER, keyDER []byte) (*CA, error) {
	root, err := x509.ParseCertificate(rootDER)
	if err != nil {
		return nil, fmt.Errorf("import CA: root certificate: %w", err)
	}
	if ca := k.Get(rootFingerprint(root)); ca != nil {
		return ca, nil
	}
	if !root.IsCA || root.CheckSignatureFrom(root) != nil {
		return nil, errors.New("import CA: not a self-signed CA certificate")
	}
	if time.Now().After(root.NotAfter) {
		return nil, fmt.Errorf("import CA: root %q expired on %s", root.Subject.CommonName, root.NotAfter.Format(time.DateOnly))
	}
	parsed, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("import CA: key: %w", err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() || !samePublicKey(key.Public(), root.PublicKey) {
		return nil, fmt.Errorf("import CA: the key is not the P-256 key of root %q", root.Subject.CommonName)
	}
	return k.add(root, key)
}

func (k *Keyring) add(root *x509.Certificate, key *ecdsa.PrivateKey) (*CA, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	fp := rootFingerprint(root)
	if ca := k.cas[fp]; ca != nil {
		return ca, nil
	}
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA directory: %w", err)
	}
	d := filepath.Join(k.dir, fp[:keyringDirLen])
	_ = os.RemoveAll(d) // an earlier add cut short
	if err := os.Mkdir(d, 0o700); err != nil {
		return nil, fmt.Errorf("create CA directory: %w", err)
	}
	if err := writeCAFiles(d, root, key); err != nil {
		_ = os.RemoveAll(d)
		return nil, err
	}
	ca, err := LoadCA(d, k.opts...)
	if err != nil {
		_ = os.RemoveAll(d)
		return nil, err
	}
	k.cas[fp] = ca
	return ca, nil
}

// Export returns the root certificate and PKCS#8 key of the CA with
// fingerprint fp, for a hand-off to another voter.
func (k *Keyring) Export(fp string) (rootDER, keyDER []byte, err error) {
	ca := k.Get(fp)
	if ca == nil {
		return nil, nil, fmt.Errorf("%w: this node holds no key for root %s", ErrNoCA, shortFP(fp))
	}
	keyDER, err = ca.keyDER()
	if err != nil {
		return nil, nil, err
	}
	return ca.root.Raw, keyDER, nil
}

// Remove deletes the CA with fingerprint fp from memory and disk (its key
// file first). Removing a root that is not held is a no-op.
func (k *Keyring) Remove(fp string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	ca := k.cas[fp]
	if ca == nil {
		return nil
	}
	delete(k.cas, fp)
	_ = ca.Close()
	if err := os.Remove(filepath.Join(ca.dir, caKeyFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete CA key: %w", err)
	}
	if ca.dir == k.dir { // written by InitCA into the keyring's own directory
		err := os.Remove(filepath.Join(ca.dir, caCertFile))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.RemoveAll(ca.dir)
}

// Close stops every CA's authority.
func (k *Keyring) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var err error
	for _, ca := range k.cas {
		err = errors.Join(err, ca.Close())
	}
	return err
}

func rootFingerprint(c *x509.Certificate) string {
	return fingerprintOf(c.Raw)
}

func shortFP(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}
