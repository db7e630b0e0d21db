package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Layout of a node's data directory. Everything is created 0700/0600.
//
//	node.json      who this node is (written last on first start: its presence marks a complete init)
//	LOCK           flock held while a node process runs on the directory
//	ca/            the cluster CA keys and roots (voters only; see identity/DESIGN.md)
//	node/          this node's key, certificate and the cluster root
//	operator/      the local operator's device credential, for the CLI on this machine
//	raft/          raft log (bbolt) and snapshots
//	blobs/         content-addressed modules and artifacts
//	wasm-cache/    wazero's compiled-code cache
//	browser/       the running browsers' Chromium profiles (emptied at start: one left there is a killed process's)
//	refused.json   present while the cluster refuses this node's certificate (it was removed): for 'palyra doctor'
type Layout struct{ Dir string }

func (l Layout) StateFile() string   { return filepath.Join(l.Dir, "node.json") }
func (l Layout) LockFile() string    { return filepath.Join(l.Dir, "LOCK") }
func (l Layout) CADir() string       { return filepath.Join(l.Dir, "ca") }
func (l Layout) NodeCredDir() string { return filepath.Join(l.Dir, "node") }
func (l Layout) OperatorDir() string { return filepath.Join(l.Dir, "operator") }
func (l Layout) RaftDir() string     { return filepath.Join(l.Dir, "raft") }
func (l Layout) BlobDir() string     { return filepath.Join(l.Dir, "blobs") }
func (l Layout) WasmCacheDir() string {
	return filepath.Join(l.Dir, "wasm-cache")
}
func (l Layout) BrowserDir() string  { return filepath.Join(l.Dir, "browser") }
func (l Layout) RefusedFile() string { return filepath.Join(l.Dir, "refused.json") }

// Refusal is refused.json: since when the node has found that the
// cluster refuses its certificate, and how it knows (watchSelfRefused).
// 'palyra doctor' reads it: the certificate itself has not expired, and
// only the node can tell that every peer turns it away.
type Refusal struct {
	Since   time.Time `json:"since"`
	Because string    `json:"because"`
}

// ReadRefusal reads refused.json; ok is false when the node has not found
// itself refused (or the file cannot be read).
func (l Layout) ReadRefusal() (r Refusal, ok bool) {
	data, err := os.ReadFile(l.RefusedFile())
	if err != nil || json.Unmarshal(data, &r) != nil {
		return Refusal{}, false
	}
	return r, true
}

// recordRefusal writes refused.json when refused (keeping an earlier
// Since) and removes it when not.
func (l Layout) recordRefusal(refused bool, because string, now time.Time) error {
	if !refused {
		if err := os.Remove(l.RefusedFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	old, ok := l.ReadRefusal()
	if ok && old.Because == because {
		return nil
	}
	r := Refusal{Since: now.UTC(), Because: because}
	if ok {
		r.Since = old.Since
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(l.RefusedFile(), append(data, '\n'), 0o600)
}

// State is node.json: the node's stable facts.
type State struct {
	NodeID      string `json:"node_id"`
	ClusterName string `json:"cluster_name"`
	// Address is the QUIC address the node last advertised (the one its
	// peers dial); the CLI on this machine uses it when --addr is not given.
	Address string `json:"address"`
	// Listen is the UDP address the node last bound (its port resolved),
	// and Advertise the --advertise it was given, if any: a restart
	// without --listen binds them again.
	Listen    string `json:"listen,omitempty"`
	Advertise string `json:"advertise,omitempty"`
	// Network is the timer set the node runs with (lan or wan).
	Network string `json:"network,omitempty"`
	// MetricsListen is the address /metrics was served on at the last
	// start (its port resolved), and MetricsAllowRemote whether it was
	// allowed to be other than loopback: a restart without
	// --metrics-listen serves it again; --metrics-listen off forgets it.
	MetricsListen      string `json:"metrics_listen,omitempty"`
	MetricsAllowRemote bool   `json:"metrics_allow_remote,omitempty"`
	Version            int    `json:"version"`
	// DataVersion is the newest data format a binary that used this data
	// dir wrote (DataVersion constant): a binary that knows an older one
	// refuses to start on it, as its replica would apply the newer
	// entries differently.
	DataVersion int `json:"data_version,omitempty"`
	// OperatorID is the local operator device created at init (first node).
	OperatorID string `json:"operator_id,omitempty"`
	// Seeds are node addresses to contact at start (set by node join).
	Seeds []string `json:"seeds,omitempty"`
	// Joined marks a node that joined an existing cluster (it must not
	// bootstrap one of its own).
	Joined bool `json:"joined,omitempty"`
	// ReplicateBlobs asks the node to push the blobs it holds to its
	// peers once it has some (set by a snapshot restore and an outage
	// recovery, when it may hold the only copies).
	ReplicateBlobs bool `json:"replicate_blobs,omitempty"`
}

// DataVersion is the data format this software writes: raft entries and
// snapshots with the fields it knows. It goes up when a newer version's
// entries would apply differently on this one (2: ended job output,
// operators' key-value writes in the audit journal, hook rules; 3: entries
// stamped with hook rules 2, whose after_run inputs say exit_code null
// where a version-2 replica would write 0).
const DataVersion = 3

// checkDataVersion refuses a data dir a newer binary has used.
func checkDataVersion(l Layout, st State) error {
	if st.DataVersion > DataVersion {
		return fmt.Errorf("%s was last used by a newer palyra (data version %d; this binary knows %d): its raft log may hold entries this one would apply differently from the other nodes; start the newer binary (to go back to this one, restore a snapshot taken with it)",
			l.Dir, st.DataVersion, DataVersion)
	}
	return nil
}

// ErrNoState means the data dir holds no initialised node.
var ErrNoState = errors.New("no palyra node in this data dir")

// ReadState reads node.json.
func (l Layout) ReadState() (State, error) {
	var s State
	data, err := os.ReadFile(l.StateFile())
	if errors.Is(err, fs.ErrNotExist) {
		return s, fmt.Errorf("%w: %s", ErrNoState, l.Dir)
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("corrupt %s: %w", l.StateFile(), err)
	}
	return s, nil
}

// WriteState writes node.json atomically.
func (l Layout) WriteState(s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(l.StateFile(), append(data, '\n'), 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	// The rename is durable only once the directory is.
	return fsyncDir(filepath.Dir(path))
}

// lock takes an exclusive flock on the data dir so two node processes can
// never share it (bbolt would otherwise block forever on its own lock).
func (l Layout) lock() (release func(), err error) {
	f, err := os.OpenFile(l.LockFile(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another palyra node (stop it, or use another --data-dir)", l.Dir)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Running reports whether a node process holds the data dir (its lock):
// for 'palyra doctor', which must not take another node's answer for this
// one's. It takes the lock only shared and only for an instant.
func (l Layout) Running() bool {
	f, err := os.Open(l.LockFile())
	if err != nil {
		return false // no lock file: no node ever ran here
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// makePrivate creates dir if needed and takes group and other access off
// it: it holds keys and the cluster's secrets. It reports whether it had
// to tighten an existing dir's mode.
func makePrivate(dir string) (tightened bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return false, err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return false, nil
	}
	if err := os.Chmod(dir, fi.Mode().Perm()&0o700); err != nil {
		return false, fmt.Errorf("data dir %s is readable by other users and cannot be made private: %w (chmod 700 it)", dir, err)
	}
	return true, nil
}
