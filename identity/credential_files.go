package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A credential is three files that must change together. SaveCredential
// stages each as NAME.new, then writes the marker file: that write is the
// commit point. Committing renames every NAME.new over NAME and removes the
// marker. After a crash, recoverCredential rolls a committed save forward
// (marker present) or throws an uncommitted one away (no marker), so a reader
// never sees the new key with the old certificate.

const (
	credPendingMarker = "credential.pending"
	stagedSuffix      = ".new"
)

// credFileModes lists the credential files in staging order with their modes.
var credFileModes = []struct {
	name string
	mode fs.FileMode
}{
	{credCertFile, 0o644},
	{credKeyFile, 0o600},
	{credCAFile, 0o644},
}

// stageCredential durably writes files as NAME.new and then the commit marker.
func stageCredential(dir string, files map[string][]byte) error {
	// Finish or discard whatever an earlier save left behind first, so a
	// half-renamed earlier save cannot mix with this one.
	if err := recoverCredential(dir); err != nil {
		return err
	}
	for _, f := range credFileModes {
		data, ok := files[f.name]
		if !ok {
			return fmt.Errorf("stage credential: %s missing", f.name)
		}
		if err := writeFileAtomic(filepath.Join(dir, f.name+stagedSuffix), data, f.mode); err != nil {
			return err
		}
	}
	return writeFileAtomic(filepath.Join(dir, credPendingMarker), []byte("staged credential files are complete\n"), 0o600)
}

// commitCredential moves the staged files into place and clears the marker.
// A staged file that is already gone was moved by an earlier attempt.
func commitCredential(dir string) error {
	for _, f := range credFileModes {
		final := filepath.Join(dir, f.name)
		err := os.Rename(final+stagedSuffix, final)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("commit credential: %w", err)
		}
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, credPendingMarker)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("commit credential: %w", err)
	}
	return syncDir(dir)
}

// rollForwardCommitted completes a committed save and leaves anything else
// alone.
func rollForwardCommitted(dir string) error {
	_, err := os.Stat(filepath.Join(dir, credPendingMarker))
	switch {
	case err == nil:
		return commitCredential(dir)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return err
}

// recoverCredential completes a committed save or discards an uncommitted
// one; only a writer calls it. A missing dir has nothing to recover.
func recoverCredential(dir string) error {
	_, err := os.Stat(filepath.Join(dir, credPendingMarker))
	switch {
	case err == nil:
		return commitCredential(dir)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	for _, f := range credFileModes {
		err := os.Remove(filepath.Join(dir, f.name+stagedSuffix))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("discard unfinished credential save: %w", err)
		}
	}
	return nil
}
