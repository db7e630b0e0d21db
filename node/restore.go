package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/backup"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// RestoreConfig says where to restore a snapshot and as what node.
type RestoreConfig struct {
	DataDir string
	// Listen is where the restored node will listen (node start
	// --listen); Advertise, if set, the address peers dial. The restored
	// cluster's raft configuration names it.
	Listen    string
	Advertise string
	// Force replaces the contents of a non-empty data dir.
	Force   bool
	CertTTL time.Duration // node and operator certificates (default 24h)
	Logger  *slog.Logger
}

// RestoreInfo says what a restore made.
type RestoreInfo struct {
	SnapshotInfo
	DataDir    string
	NodeID     string   // the restored cluster's first node (new)
	OperatorID string   // its local operator device (new)
	Address    string   // its raft address
	Revoked    []string // the old cluster's nodes, revoked
}

// SnapshotInfo is what a snapshot file holds, read and checked to its end.
type SnapshotInfo struct {
	Header  backup.Header
	Summary backup.Summary
	Bytes   int64
	// From the state itself (recounted, not taken from the summary):
	Jobs          uint64
	Arrays        uint64
	JobsByPhase   map[string]uint64
	Members       []consensus.Member
	Secrets       int
	PolicyVersion uint64
	BlobsNamed    int // blobs the state names
	Skills, Hooks int
	KVKeys        int
	KVBytes       int64
	Audit         consensus.JournalSummary
	Blobs         int // blobs the file carries
	BlobBytes     int64
}

// ErrDataDirNotEmpty is returned when a restore would overwrite a data dir.
var ErrDataDirNotEmpty = errors.New("data dir is not empty")

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// InspectSnapshot reads a snapshot file to its end and checks everything
// a restore would (framing, blob hashes, checksum, every state record),
// writing nothing.
func InspectSnapshot(src io.Reader) (SnapshotInfo, error) {
	var info SnapshotInfo
	cr := &countingReader{r: src}
	var contents consensus.SnapshotContents
	var hdr backup.Header
	h, s, err := backup.Read(cr, backup.Visitor{
		Header: func(h backup.Header) error { hdr = h; return nil },
		Keys: func(k backup.Keys) error {
			if err := checkKeys(k); err != nil {
				return err
			}
			if caFingerprint(k.CACertPEM) != hdr.CAFingerprint {
				return &backup.FormatError{Msg: "the CA in the file is not the one its header names"}
			}
			return nil
		},
		State: func(r io.Reader) error {
			var err error
			contents, err = consensus.ScanSnapshot(r)
			return stateErr(err)
		},
		Blob: func(_ string, size int64, r io.Reader) error {
			info.Blobs++
			info.BlobBytes += size
			return nil
		},
	})
	info.fill(h, s, contents, cr.n)
	return info, err
}

func (info *SnapshotInfo) fill(h backup.Header, s backup.Summary, c consensus.SnapshotContents, n int64) {
	info.Header, info.Summary, info.Bytes = h, s, n
	info.Jobs, info.Arrays, info.Members, info.Secrets = c.Jobs, c.Arrays, c.Members, c.Secrets
	info.PolicyVersion, info.BlobsNamed = c.PolicyVersion, len(c.Blobs)
	info.Skills, info.Hooks, info.KVKeys, info.KVBytes = c.Skills, c.Hooks, c.KVKeys, c.KVBytes
	info.Audit = c.Audit
	info.JobsByPhase = map[string]uint64{}
	for p, v := range c.JobsByPhase {
		info.JobsByPhase[p.String()] = v
	}
}

// stateErr marks an undecodable state as damage of the file; other
// errors (a full disk) stay what they are.
func stateErr(err error) error {
	var fe *backup.FormatError
	if err == nil || errors.As(err, &fe) || !errors.Is(err, consensus.ErrDamagedSnapshot) {
		return err
	}
	return &backup.FormatError{Msg: "the state section does not decode: " + err.Error()}
}

// checkKeys refuses a keys record that cannot make a cluster.
func checkKeys(k backup.Keys) error {
	if len(k.DataKey) != dataKeyLen {
		return &backup.FormatError{Msg: fmt.Sprintf("the cluster data key is %d bytes, want %d", len(k.DataKey), dataKeyLen)}
	}
	if b, _ := pem.Decode(k.CACertPEM); b == nil {
		return &backup.FormatError{Msg: "the cluster CA certificate is missing"}
	}
	if b, _ := pem.Decode(k.CAKeyPEM); b == nil {
		return &backup.FormatError{Msg: "the cluster CA key is missing"}
	}
	return nil
}

// Restore makes cfg.DataDir the first node of a cluster restored from a
// snapshot file: the same cluster (its CA, data key, jobs, members,
// policy, secrets and blobs) at the snapshot's raft index, with one new
// node as its only voter and a new local operator credential. Nodes of
// the old cluster are revoked in the restored one (they hold another
// history and must never rejoin it); more nodes join by pairing, as
// ever. Start the node with 'palyra node start'.
//
// The data dir must be empty or absent, unless Force (then what it held
// is deleted). Nothing is left behind on failure: a damaged or truncated
// file restores nothing, and node.json, written last, marks a complete
// restore.
func Restore(ctx context.Context, src io.Reader, cfg RestoreConfig) (_ RestoreInfo, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.CertTTL == 0 {
		cfg.CertTTL = 24 * time.Hour
	}
	addr := cfg.Advertise
	if addr == "" {
		addr = cfg.Listen
	}
	host, port, aerr := net.SplitHostPort(addr)
	if aerr != nil || port == "0" || port == "" {
		return RestoreInfo{}, fmt.Errorf("address %q is not HOST:PORT with a fixed port: give the --listen the node will start with", addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return RestoreInfo{}, fmt.Errorf("address %q is a wildcard: give --advertise, the address other nodes dial", addr)
	}
	target := Layout{Dir: cfg.DataDir}
	info := RestoreInfo{DataDir: target.Dir, Address: addr}
	created, held, unlock, err := prepareRestoreDir(target, cfg.Force)
	if err != nil {
		return info, err
	}
	// Over a data dir that holds something (--force), the restore is made
	// beside it and swapped in only once complete: a damaged, truncated
	// or unreadable file, a full disk or an interrupt then leaves what was
	// there as it was.
	l, swapping := target, false
	if held {
		// Inside the data dir: on its filesystem whatever it is (a mount
		// point, a symlink to a volume), with no need of a writable parent.
		stage, err := os.MkdirTemp(target.Dir, stagePrefix)
		if err != nil {
			unlock()
			return info, fmt.Errorf("make a directory to restore into in %s: %w", target.Dir, err)
		}
		l = Layout{Dir: stage}
	}
	defer func() {
		if err == nil {
			unlock()
			return
		}
		var cerr error
		if held {
			if !swapping { // a failed swap says where everything is
				cerr = os.RemoveAll(l.Dir)
			}
			unlock()
		} else {
			cerr = clearDataDir(l)
			unlock()
			if cerr == nil {
				// Leave the directory as it was found: absent, or empty.
				cerr = os.Remove(l.LockFile())
				if created && cerr == nil {
					cerr = os.Remove(l.Dir)
				}
			}
		}
		if cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up %s: %w", l.Dir, cerr))
		}
	}()

	blobs, err := blob.Open(l.BlobDir())
	if err != nil {
		return info, err
	}
	nodeP := identity.Principal{Kind: identity.KindNode, ID: identity.NewID(identity.KindNode)}
	opP := identity.Principal{Kind: identity.KindDevice, ID: identity.NewID(identity.KindDevice)}
	info.NodeID, info.OperatorID = nodeP.ID, opP.ID
	var hdr backup.Header
	var contents consensus.SnapshotContents
	cr := &countingReader{r: src}
	h, s, err := backup.Read(cr, backup.Visitor{
		Header: func(h backup.Header) error {
			if h.RaftIndex == 0 || h.RaftTerm == 0 || h.ClusterName == "" {
				return &backup.FormatError{Msg: "the header names no cluster or raft position"}
			}
			hdr = h
			return nil
		},
		Keys: func(k backup.Keys) error {
			if err := checkKeys(k); err != nil {
				return err
			}
			return restoreIdentity(ctx, l, k, hdr, nodeP, opP, cfg)
		},
		State: func(r io.Reader) error {
			var err error
			contents, err = consensus.SeedSnapshot(consensus.SeedConfig{Dir: l.RaftDir(), NodeID: nodeP.ID, Address: addr,
				Index: hdr.RaftIndex, Term: hdr.RaftTerm, Logger: cfg.Logger, After: func(c consensus.SnapshotContents) []*raftpb.Command {
					at := time.Now().UnixMilli()
					cmds, ids := revokeOldNodes(c.Members, at, "snapshot restore")
					info.Revoked = ids
					return append(cmds, restoredLedger(l, nodeP, opP, at)...)
				}}, r)
			return stateErr(err)
		},
		Blob: func(hash string, size int64, r io.Reader) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			data, err := io.ReadAll(r) // checked against hash at its end
			if err != nil {
				return err
			}
			if _, err := blobs.Put(data); err != nil {
				return err
			}
			info.Blobs++
			info.BlobBytes += size
			return nil
		},
	})
	info.fill(h, s, contents, cr.n)
	if err != nil {
		return info, err
	}
	st := State{NodeID: nodeP.ID, ClusterName: hdr.ClusterName, Address: addr, Version: 1, OperatorID: opP.ID,
		ReplicateBlobs: true}
	if err := l.WriteState(st); err != nil {
		return info, fmt.Errorf("write node state: %w", err)
	}
	if held {
		swapping = true
		if err := swapIn(target, l, cfg.Logger); err != nil {
			return info, err
		}
	}
	cfg.Logger.Info("restored a cluster from a snapshot", "cluster", hdr.ClusterName, "raft_index", hdr.RaftIndex,
		"node", nodeP.ID, "jobs", info.Jobs, "blobs", info.Blobs, "revoked_old_nodes", len(info.Revoked), "data_dir", target.Dir)
	return info, nil
}

// restoreIdentity writes the snapshot's CA and data key and issues the
// new node's and operator's credentials with that CA.
func restoreIdentity(ctx context.Context, l Layout, k backup.Keys, hdr backup.Header, nodeP, opP identity.Principal, cfg RestoreConfig) error {
	if err := identity.ImportCA(l.CADir(), k.CACertPEM, k.CAKeyPEM); err != nil {
		return err
	}
	ca, err := identity.LoadCA(l.CADir(), identity.WithLogger(cfg.Logger))
	if err != nil {
		return err
	}
	defer ca.Close()
	if hdr.CAFingerprint != "" && ca.Fingerprint() != hdr.CAFingerprint {
		return &backup.FormatError{Msg: "the CA in the file is not the one its header names"}
	}
	if err := writeDataKey(l, k.DataKey); err != nil {
		return err
	}
	ncfg := Config{CertTTL: cfg.CertTTL}
	if err := issueLocal(ctx, ca, nodeP, ncfg, l.NodeCredDir()); err != nil {
		return fmt.Errorf("issue node certificate: %w", err)
	}
	if err := issueLocal(ctx, ca, opP, ncfg, l.OperatorDir()); err != nil {
		return fmt.Errorf("issue operator credential: %w", err)
	}
	return nil
}

// restoredLedger returns the commands that record the restored node's and
// operator's certificates and restart the certificate ledger: whatever
// the cluster issued after the snapshot was taken is not in it, so
// certificates issued before now are accepted until they expire.
func restoredLedger(l Layout, nodeP, opP identity.Principal, at int64) []*raftpb.Command {
	var certs []*raftpb.IssuedCert
	for _, c := range []struct {
		dir string
		p   identity.Principal
	}{{l.NodeCredDir(), nodeP}, {l.OperatorDir(), opP}} {
		if cred, err := identity.LoadCredential(c.dir); err == nil {
			certs = append(certs, consensus.IssuedCertPB(cred.Leaf, string(c.p.Kind), c.p.ID))
		}
	}
	return []*raftpb.Command{
		{Cmd: &raftpb.Command_RecordCerts{RecordCerts: &raftpb.RecordCerts{Certs: certs, AtMs: at}}},
		{Cmd: &raftpb.Command_StartCertLedger{StartCertLedger: &raftpb.StartCertLedger{AtMs: at,
			Reason: "snapshot restore: certificates issued before are accepted until they expire"}}},
	}
}

// revokeOldNodes returns commands revoking every node member not revoked
// yet, with the local operator credentials made on their machines (their
// keys are on the disks the operator is told to wipe; paired devices, an
// operator's laptop say, stay), and the nodes' ids.
func revokeOldNodes(members []consensus.Member, atMS int64, by string) ([]*raftpb.Command, []string) {
	var cmds []*raftpb.Command
	var ids []string
	var devices []consensus.Member
	for _, m := range members {
		if m.Kind == "device" {
			devices = append(devices, m)
		}
	}
	revoke := func(m consensus.Member) {
		cmds = append(cmds, &raftpb.Command{Cmd: &raftpb.Command_RevokeMember{RevokeMember: &raftpb.RevokeMember{
			Kind: m.Kind, Id: m.ID, AtMs: atMS, By: by}}})
	}
	for _, m := range members {
		if m.Kind != "node" || m.Revoked {
			continue
		}
		ids = append(ids, m.ID)
		revoke(m)
		for _, d := range consensus.LocalOperatorsOf(devices, m) {
			if !d.Revoked {
				revoke(d)
			}
		}
	}
	return cmds, ids
}

// prepareRestoreDir makes sure dir is absent or empty (or, with force,
// may hold something, which it reports as held) and takes its lock, so
// no node runs on it meanwhile. It says whether it created the directory.
func prepareRestoreDir(l Layout, force bool) (created, held bool, unlock func(), err error) {
	entries, err := os.ReadDir(l.Dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(l.Dir, 0o700); err != nil {
			return false, false, nil, fmt.Errorf("create data dir: %w", err)
		}
		created = true
	case err != nil:
		return false, false, nil, fmt.Errorf("read data dir: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != filepath.Base(l.LockFile()) {
			names = append(names, e.Name())
		}
	}
	if len(names) > 0 && !force {
		what := fmt.Sprintf("%d entries, e.g. %s", len(names), names[0])
		if st, err := l.ReadState(); err == nil {
			what = fmt.Sprintf("node %s of cluster %s", st.NodeID, st.ClusterName)
		}
		return false, false, nil, fmt.Errorf("%w: %s holds %s", ErrDataDirNotEmpty, l.Dir, what)
	}
	unlock, err = l.lock()
	if err != nil {
		return false, false, nil, err
	}
	return created, len(names) > 0, unlock, nil
}

// Names inside a data dir during a forced restore: the restore being
// written, the contents it replaces, and the marker that a swap is under
// way (node start refuses the dir while it is there).
const (
	stagePrefix    = ".restore-"
	replacedPrefix = ".replaced-"
	restoringFile  = "RESTORING"
)

// swapIn replaces what target holds (but its lock) with what stage (a
// directory inside target) holds. RESTORING is written first and removed
// last, so a crash part way leaves a data dir that node start refuses,
// naming where the old contents and the restore are, rather than one it
// would take for new (no node.json) and initialise as a new cluster.
func swapIn(target, stage Layout, log *slog.Logger) error {
	marker := filepath.Join(target.Dir, restoringFile)
	note := "a snapshot restore (--force) was replacing this data dir's contents; the old ones are in " +
		replacedPrefix + "*, the restored ones partly in place and partly in " + filepath.Base(stage.Dir) +
		": run the restore again, or put the old contents back and remove this file\n"
	if err := writeFileAtomic(marker, []byte(note), 0o600); err != nil {
		return fmt.Errorf("mark %s as being restored: %w", target.Dir, err)
	}
	old, err := os.MkdirTemp(target.Dir, replacedPrefix)
	if err != nil {
		return fmt.Errorf("make a directory for the replaced contents in %s: %w", target.Dir, err)
	}
	move := func(from, to string, skip func(string) bool) error {
		entries, err := os.ReadDir(from)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if skip(e.Name()) {
				continue
			}
			if err := os.Rename(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	lock, state := filepath.Base(target.LockFile()), filepath.Base(target.StateFile())
	ours := func(n string) bool {
		return n == lock || n == restoringFile || n == filepath.Base(stage.Dir) || n == filepath.Base(old)
	}
	if err := move(target.Dir, old, ours); err != nil {
		return fmt.Errorf("moving %s's contents aside to %s: %w", target.Dir, old, err)
	}
	err = move(stage.Dir, target.Dir, func(n string) bool { return n == state })
	if err == nil {
		err = os.Rename(stage.StateFile(), target.StateFile())
	}
	if err == nil {
		err = fsyncDir(target.Dir)
	}
	if err != nil {
		return fmt.Errorf("moving the restored node into %s (the replaced contents are in %s, the rest of the restore in %s): %w", target.Dir, old, stage.Dir, err)
	}
	if err := os.Remove(marker); err != nil {
		return fmt.Errorf("the restore is in place, but %s could not be removed (remove it by hand): %w", marker, err)
	}
	// The restore is complete: failing to delete what it replaced is not
	// a failed restore.
	if err := errors.Join(os.RemoveAll(old), os.Remove(stage.Dir)); err != nil {
		log.Warn("the restore is in place; remove the replaced contents by hand", "dir", old, "err", err)
	}
	return nil
}

// fsyncDir makes dir's entries (the renames into it) durable.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkNoRestoreInProgress refuses a data dir whose forced restore did not
// finish (RESTORING is there).
func checkNoRestoreInProgress(l Layout) error {
	b, err := os.ReadFile(filepath.Join(l.Dir, restoringFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(l.Dir, restoringFile), err)
	}
	return fmt.Errorf("%s holds an unfinished snapshot restore, so it is refused: %s", l.Dir, strings.TrimSpace(string(b)))
}

// clearDataDir deletes everything in the data dir but its lock file.
func clearDataDir(l Layout) error {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Name() == filepath.Base(l.LockFile()) {
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(l.Dir, e.Name())))
	}
	return errors.Join(errs...)
}

// caFingerprint is the sha256 of a PEM certificate's DER, as the cluster
// names its CA.
func caFingerprint(certPEM []byte) string {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return ""
	}
	sum := sha256.Sum256(b.Bytes)
	return hex.EncodeToString(sum[:])
}
