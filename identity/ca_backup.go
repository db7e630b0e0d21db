package identity

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ExportCA returns the PEM files of the CA in dir (certificate, key),
// checked as LoadCA checks them, for a cluster snapshot.
func ExportCA(dir string) (certPEM, keyPEM []byte, err error) {
	if _, _, err := readCAFiles(dir); err != nil {
		return nil, nil, err
	}
	if certPEM, err = os.ReadFile(filepath.Join(dir, caCertFile)); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = readKeyFile(filepath.Join(dir, caKeyFile)); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// ImportCA writes a CA exported with ExportCA into dir (created 0700; it
// must hold no CA yet) and checks that it loads: the key matches the
// certificate, which is a self-signed, unexpired CA.
func ImportCA(dir string, certPEM, keyPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create CA directory: %w", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, caCertFile)); err == nil {
		return fmt.Errorf("%w in %s", ErrCAExists, dir)
	}
	if err := writeFileAtomic(filepath.Join(dir, caKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := writeFileExclusive(filepath.Join(dir, caCertFile), certPEM, 0o644); err != nil {
		return err
	}
	if _, _, err := readCAFiles(dir); err != nil {
		return errors.Join(fmt.Errorf("the CA in the snapshot does not load: %w", err),
			os.Remove(filepath.Join(dir, caCertFile)), os.Remove(filepath.Join(dir, caKeyFile)))
	}
	return nil
}
