package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/node/backup"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func snapshotCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "snapshot",
		Usage: "back up the whole cluster to a file, and restore it into new nodes",
		Description: `A snapshot is the cluster's replicated state as of one raft index (every job,
   member, pairing, policy, secret and key-value entry), every blob that state
   names (modules, large inputs and outputs, artifacts), and the cluster's keys
   (its CA and the data key that seals secrets): with it a lost cluster comes
   back as the same cluster. Keep it as safe as those keys.

     palyra snapshot save backup.snap                       # from a running cluster
     palyra snapshot inspect backup.snap                    # check a file
     palyra snapshot restore backup.snap --data-dir /var/lib/palyra --listen 10.0.0.1:7444`,
		Subcommands: []*ucli.Command{
			{
				Name:      "save",
				Usage:     "stream a consistent, checksummed snapshot of the cluster to FILE ('-' for stdout)",
				ArgsUsage: "FILE",
				Description: `Any node answers (one that does not hold the cluster CA points to one that
   does). The state is taken at one raft index after a linearizable read, so it
   holds every job accepted before the command started; jobs submitted while it
   runs may or may not be in it. The file is written next to FILE, checked
   end to end (every record, every blob's sha256, the trailing checksum) and
   only then renamed to FILE (mode 0600), so a failed save never leaves a
   truncated file. An existing FILE is kept: the save is refused unless
   --force. Progress goes to stderr.
   Needs the snapshot.save permission (operators have it).`,
				Flags: []ucli.Flag{
					&ucli.BoolFlag{Name: "force", Usage: "replace FILE if it exists (it is replaced only once the new snapshot is complete and checked)"},
					jsonFlag,
				},
				Action: snapshotSave,
			},
			{
				Name:      "restore",
				Usage:     "restore a snapshot into a new data dir: the first node of the restored cluster",
				ArgsUsage: "FILE",
				Description: `Writes a data dir (--data-dir) from which 'palyra node start' runs the
   restored cluster: the same CA and data key (devices paired before keep
   working, secrets open), every job, member, policy and secret at the
   snapshot's raft index, its blobs, one new node as the only voter and a new
   local operator credential. The old cluster's nodes are revoked, with the
   local operator credentials made on their machines (paired devices, an
   operator's laptop say, keep working): wipe those machines and join them
   again with new codes. Jobs that were running are
   run again (as a new attempt).

   The data dir must be empty or absent unless --force, which replaces what
   it holds once the restore is complete: the restore is written inside it
   and swapped in at the end (as much free space again is needed), so a
   damaged or truncated file restores nothing and deletes nothing.

     palyra snapshot restore backup.snap --data-dir /var/lib/palyra --listen 10.0.0.1:7444
     palyra node start --data-dir /var/lib/palyra --listen 10.0.0.1:7444
     palyra --data-dir /var/lib/palyra pair create --kind node      # for each further node`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "listen", Usage: "UDP `HOST:PORT` the restored node will listen on (give the same to 'node start')", Value: node.DefaultListen, EnvVars: []string{"PALYRA_LISTEN"}},
					&ucli.StringFlag{Name: "advertise", Usage: "`HOST:PORT` other nodes dial (default: --listen)", EnvVars: []string{"PALYRA_ADVERTISE"}},
					&ucli.BoolFlag{Name: "force", Usage: "replace what the data dir holds, once the restore is complete (it must not be in use)"},
					jsonFlag,
				},
				Action: snapshotRestore,
			},
			{
				Name:      "inspect",
				Usage:     "read a snapshot file to its end, check it and describe it",
				ArgsUsage: "FILE",
				Description: `Reads FILE ('-' for stdin) offline, with no node: every record is decoded
   and the file's own checksums verified, so a damaged or truncated file is
   found here rather than at restore. Prints the cluster and CA it belongs
   to, when and where it was taken, the raft index and servers, counts of
   jobs (by phase), arrays, nodes, devices, key-value keys, skills and
   hooks, the audit journal's head (checked from its base, as 'palyra
   audit verify' does on a live node), and the file's sha256 to compare
   with what 'snapshot save' printed.

   Exit status: 0 when the file is intact; 1 when it is damaged, truncated
   or not a snapshot (the error names which), or cannot be read.`,
				Flags:  []ucli.Flag{jsonFlag},
				Action: snapshotInspect,
			},
		},
	}
}

// mib formats a byte count.
func mib(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// progressLine prints progress on stderr: rewritten in place on a
// terminal, else, once the work has taken a few seconds, a line every
// few seconds (short work prints nothing).
type progressLine struct {
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time
	phase string
	shown bool
}

func newProgress(c *ucli.Context) *progressLine {
	return &progressLine{w: c.App.ErrWriter, tty: isTerminal(c.App.ErrWriter), start: time.Now()}
}

func (p *progressLine) show(phase, text string) {
	every := 5 * time.Second
	if p.tty {
		every = 200 * time.Millisecond
	} else if time.Since(p.start) < 2*time.Second {
		return
	}
	if phase == p.phase && time.Since(p.last) < every {
		return
	}
	p.phase, p.last = phase, time.Now()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", text)
		p.shown = true
		return
	}
	fmt.Fprintln(p.w, text)
}

func (p *progressLine) done() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func snapshotSave(c *ucli.Context) error {
	path, err := oneArg(c, "file to write ('-' for stdout)")
	if err != nil {
		return err
	}
	if path == "-" && c.Bool("json") {
		return usageErr("--json prints to stdout, where '-' writes the snapshot; give a file name")
	}
	if err := refuseExisting(c, path); err != nil {
		return err
	}
	src, err := resolveCredential(c)
	if err != nil {
		return fail(c, &client.Error{Code: "no_credential", Message: fmt.Sprintf("no operator credential: %v", err),
			Hint: "on a node's machine pass --data-dir (the node's data dir); elsewhere pair this device with 'palyra device pair'"})
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer func() { cl.Close() }()
	prog := newProgress(c)
	stream, err := cl.Snapshots.SaveSnapshot(c.Context, connect.NewRequest(&palyrav1.SaveSnapshotRequest{}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	first := stream.Receive()
	if first && stream.Msg().RedirectAddress != "" {
		to, id := stream.Msg().RedirectAddress, stream.Msg().RedirectNodeId
		stream.Close()
		cl.Close()
		fmt.Fprintf(c.App.ErrWriter, "asking node %s at %s, which holds the cluster CA a snapshot carries\n", id, to)
		if cl, err = client.New(to, src.cred); err != nil {
			return fail(c, &client.Error{Code: "invalid_argument", Message: err.Error()})
		}
		if stream, err = cl.Snapshots.SaveSnapshot(c.Context, connect.NewRequest(&palyrav1.SaveSnapshotRequest{})); err != nil {
			return fail(c, cl.Explain(err))
		}
		first = stream.Receive()
	}

	// Write to a temporary file beside the target (stdout as it comes),
	// and check the bytes with the same reader a restore uses.
	var out io.Writer
	var tmp *os.File
	if path == "-" {
		out = c.App.Writer
	} else {
		dir := filepath.Dir(path)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fail(c, &client.Error{Code: "io", Message: fmt.Sprintf("cannot write %s: directory %s does not exist", path, dir), Hint: "create it first (mkdir -p " + dir + "), or choose a file in an existing directory"})
		}
		tmp, err = os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
		if err != nil {
			return fail(c, &client.Error{Code: "io", Message: fmt.Sprintf("cannot write %s: %v", path, err), Hint: "choose a file in a writable directory"})
		}
		defer os.Remove(tmp.Name()) // no-op once renamed
		defer tmp.Close()
		if err := tmp.Chmod(0o600); err != nil {
			return fail(c, &client.Error{Code: "io", Message: err.Error()})
		}
		out = tmp
	}
	sum := sha256.New()
	pr, pw := io.Pipe()
	checked := make(chan struct{})
	var info node.SnapshotInfo
	var checkErr error
	go func() {
		defer close(checked)
		info, checkErr = node.InspectSnapshot(pr)
		_, _ = io.Copy(io.Discard, pr) // never block the writer
	}()
	w := io.MultiWriter(out, sum, pw)
	var written int64
	var writeErr error
	for ok := first; ok; ok = stream.Receive() {
		m := stream.Msg()
		if len(m.Chunk) > 0 && writeErr == nil {
			if _, writeErr = w.Write(m.Chunk); writeErr == nil {
				written += int64(len(m.Chunk))
			}
		}
		if p := m.Progress; p != nil {
			switch p.Phase {
			case "state":
				prog.show(p.Phase, fmt.Sprintf("snapshot at raft index %d: state %s of %s", p.RaftIndex, mib(int64(p.Bytes)), mib(int64(p.StateBytes))))
			case "blobs":
				prog.show(p.Phase, fmt.Sprintf("snapshot at raft index %d: blobs %d of %d, %s written", p.RaftIndex, p.BlobsDone, p.BlobsTotal, mib(int64(p.Bytes))))
			}
		}
		if writeErr != nil {
			break
		}
	}
	prog.done()
	streamErr := stream.Err()
	stream.Close()
	pw.CloseWithError(errors.Join(streamErr, writeErr))
	<-checked
	switch {
	case writeErr != nil:
		return fail(c, &client.Error{Code: "io", Message: "writing the snapshot: " + writeErr.Error(), Hint: "check the disk space and permissions where the file goes"})
	case streamErr != nil:
		return fail(c, cl.Explain(streamErr))
	case checkErr != nil:
		return fail(c, &client.Error{Code: "corrupt_snapshot", Message: "the snapshot received does not check: " + checkErr.Error(),
			Hint: "try again; if it persists, report it with the node's log"})
	}
	if tmp != nil {
		if err := tmp.Sync(); err == nil {
			err = tmp.Close()
		}
		if err == nil {
			// A file may have appeared while the snapshot streamed.
			if err := refuseExisting(c, path); err != nil {
				return err
			}
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			return fail(c, &client.Error{Code: "io", Message: "writing the snapshot: " + err.Error()})
		}
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	digest := hex.EncodeToString(sum.Sum(nil))
	if c.Bool("json") {
		return writeJSON(c.App.Writer, snapshotJSON(path, digest, written, &info))
	}
	msg := c.App.Writer
	if path == "-" {
		msg = c.App.ErrWriter
	}
	h := info.Header
	fmt.Fprintf(msg, "snapshot of cluster %q at raft index %d (term %d) saved to %s: %d jobs, %d blobs (%s), %s in all\n",
		h.ClusterName, h.RaftIndex, h.RaftTerm, path, info.Jobs, info.Blobs, mib(info.BlobBytes), mib(written))
	fmt.Fprintf(msg, "sha256 %s  (it holds the cluster's CA and data keys: store it as safely as them)\n", digest)
	warnMissing(c, info.Summary.MissingBlobs)
	return nil
}

// refuseExisting refuses to replace an existing file (a backup, most
// likely) unless --force.
func refuseExisting(c *ucli.Context, path string) error {
	if path == "-" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		// Even with --force: a directory is not replaced (the whole
		// snapshot was taken, then the rename into it failed).
		return fail(c, &client.Error{Code: "invalid_argument", Message: fmt.Sprintf("%s is a directory", path),
			Hint: fmt.Sprintf("name a file, e.g. %s", filepath.Join(path, "palyra.snap"))})
	}
	if c.Bool("force") {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		return fail(c, &client.Error{Code: "exists", Message: fmt.Sprintf("%s exists; a snapshot save does not replace it", path),
			Hint: "choose another file name, or pass --force to replace it"})
	}
	return nil
}

func warnMissing(c *ucli.Context, missing []string) {
	if len(missing) == 0 {
		return
	}
	fmt.Fprintf(c.App.ErrWriter, "warning: %d blob(s) named by jobs were on no reachable node (lost or pruned meanwhile); those jobs come back without them: %s\n",
		len(missing), strings.Join(missing, ", "))
}

// memberCounts is how many nodes and devices a snapshot's members are.
func memberCounts(info *node.SnapshotInfo) (nodes, devices int) {
	for _, m := range info.Members {
		if m.Kind == "node" {
			nodes++
		} else {
			devices++
		}
	}
	return nodes, devices
}

// snapshotJSON is the --json form of a snapshot's description.
func snapshotJSON(path, digest string, size int64, info *node.SnapshotInfo) map[string]any {
	h := info.Header
	var servers []map[string]any
	for _, s := range h.Servers {
		servers = append(servers, map[string]any{"id": s.ID, "address": s.Address, "voter": s.Voter})
	}
	nodes, devices := memberCounts(info)
	out := map[string]any{
		"file": path, "bytes": size, "cluster_name": h.ClusterName, "ca_fingerprint": h.CAFingerprint,
		"created_at": h.CreatedAt.UTC().Format(jsonTime), "created_by": h.CreatedBy, "served_by": h.ServedBy,
		"palyra_version": h.Version, "format": h.Format, "raft_index": h.RaftIndex, "raft_term": h.RaftTerm,
		"servers": servers, "state_bytes": h.StateBytes, "applied_index": info.Summary.AppliedIndex,
		"jobs": info.Jobs, "arrays": info.Arrays, "jobs_by_phase": info.JobsByPhase, "nodes": nodes, "devices": devices,
		"secrets": info.Secrets, "policy_version": info.PolicyVersion, "blobs": info.Blobs, "blob_bytes": info.BlobBytes,
		"missing_blobs": nonNil(info.Summary.MissingBlobs),
	}
	out["kv_keys"], out["kv_bytes"], out["skills"], out["hooks"] = info.KVKeys, info.KVBytes, info.Skills, info.Hooks
	out["audit"] = map[string]any{"records": info.Audit.Records, "base_seq": info.Audit.BaseSeq, "head_seq": info.Audit.HeadSeq,
		"head_sha256": info.Audit.HeadHash, "verified": info.Audit.Problem == "", "bad_seq": info.Audit.BadSeq, "problem": info.Audit.Problem}
	if digest != "" {
		out["sha256"] = digest
	}
	return out
}

// openSnapshot opens FILE ('-': stdin) and says how big it is (0 if unknown).
func openSnapshot(c *ucli.Context, path string) (io.ReadCloser, int64, error) {
	if path == "-" {
		return io.NopCloser(c.App.Reader), 0, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fail(c, &client.Error{Code: "not_found", Message: err.Error(), Hint: "give the path of a file written by 'palyra snapshot save'"})
	}
	var size int64
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	return f, size, nil
}

// readProgress reports on stderr how much of a file has been read.
type readProgress struct {
	r     io.Reader
	n     int64
	size  int64
	verb  string
	line  *progressLine
	hashw hash.Hash
}

func (p *readProgress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.hashw != nil {
		p.hashw.Write(b[:n])
	}
	if p.size > 0 {
		p.line.show("read", fmt.Sprintf("%s snapshot: %s of %s", p.verb, mib(p.n), mib(p.size)))
	}
	return n, err
}

// snapshotErr explains a restore or inspect failure.
func snapshotErr(err error) *client.Error {
	var fe *backup.FormatError
	switch {
	case errors.As(err, &fe):
		return &client.Error{Code: "corrupt_snapshot", Message: fe.Error(), Hint: fe.Hint()}
	case errors.Is(err, backup.ErrNewerFormat):
		return &client.Error{Code: "unsupported", Message: err.Error(), Hint: "use the palyra version that saved it, or a newer one"}
	case errors.Is(err, node.ErrDataDirNotEmpty):
		return &client.Error{Code: "exists", Message: err.Error(), Hint: "restore into an empty --data-dir, or pass --force to replace its contents"}
	}
	return &client.Error{Code: "restore_failed", Message: err.Error()}
}

func snapshotInspect(c *ucli.Context) error {
	path, err := oneArg(c, "snapshot file ('-' for stdin)")
	if err != nil {
		return err
	}
	f, size, err := openSnapshot(c, path)
	if err != nil {
		return err
	}
	defer f.Close()
	line := newProgress(c)
	rp := &readProgress{r: f, size: size, verb: "checking", line: line, hashw: sha256.New()}
	info, err := node.InspectSnapshot(rp)
	line.done()
	if err != nil {
		return fail(c, snapshotErr(err))
	}
	digest := hex.EncodeToString(rp.hashw.Sum(nil))
	if c.Bool("json") {
		return writeJSON(c.App.Writer, snapshotJSON(path, digest, rp.n, &info))
	}
	h := info.Header
	w := c.App.Writer
	fmt.Fprintf(w, "file        %s (%s), format %d, sha256 %s: checked, intact\n", path, mib(rp.n), h.Format, digest)
	fmt.Fprintf(w, "cluster     %s, CA %s\n", h.ClusterName, h.CAFingerprint)
	fmt.Fprintf(w, "taken       %s by %s on node %s (palyra %s)\n", h.CreatedAt.Format(time.RFC3339), h.CreatedBy, h.ServedBy, h.Version)
	fmt.Fprintf(w, "raft        index %d, term %d; state applied to index %d\n", h.RaftIndex, h.RaftTerm, info.Summary.AppliedIndex)
	var servers []string
	for _, s := range h.Servers {
		role := "non-voter"
		if s.Voter {
			role = "voter"
		}
		servers = append(servers, fmt.Sprintf("%s %s (%s)", s.ID, s.Address, role))
	}
	fmt.Fprintf(w, "servers     %s\n", strings.Join(servers, ", "))
	phases := make([]string, 0, len(info.JobsByPhase))
	for p, n := range info.JobsByPhase {
		phases = append(phases, fmt.Sprintf("%s %d", p, n))
	}
	sort.Strings(phases)
	fmt.Fprintf(w, "jobs        %d (%s), %d arrays\n", info.Jobs, strings.Join(phases, ", "), info.Arrays)
	var nodes, devices []string
	for _, m := range info.Members {
		id := m.ID
		if m.Revoked {
			id += " (revoked)"
		} else if m.Operator {
			id += " (operator)"
		}
		if m.Kind == "node" {
			nodes = append(nodes, id)
		} else {
			devices = append(devices, id)
		}
	}
	fmt.Fprintf(w, "nodes       %s\n", strings.Join(nodes, ", "))
	fmt.Fprintf(w, "devices     %s\n", strings.Join(devices, ", "))
	fmt.Fprintf(w, "secrets     %d; policy version %d\n", info.Secrets, info.PolicyVersion)
	fmt.Fprintf(w, "kv          %d keys (%s of values)\n", info.KVKeys, mib(info.KVBytes))
	fmt.Fprintf(w, "skills      %d installed, %d hooks bound\n", info.Skills, info.Hooks)
	audit := "verified from its base"
	if info.Audit.Problem != "" {
		audit = fmt.Sprintf("DOES NOT VERIFY at seq %d: %s", info.Audit.BadSeq, info.Audit.Problem)
	}
	span := fmt.Sprintf("seq %d..%d", info.Audit.BaseSeq+1, info.Audit.HeadSeq)
	if info.Audit.Records == 0 {
		span = fmt.Sprintf("none retained after seq %d", info.Audit.BaseSeq)
	}
	fmt.Fprintf(w, "audit       %d records (%s), head %s: %s\n", info.Audit.Records, span, info.Audit.HeadHash, audit)
	fmt.Fprintf(w, "blobs       %d (%s) of the %d the state names\n", info.Blobs, mib(info.BlobBytes), info.BlobsNamed)
	warnMissing(c, info.Summary.MissingBlobs)
	warnAudit(c, &info)
	return nil
}

// warnAudit says on stderr that the audit journal a snapshot carries does
// not verify: the file's own checksums hold (it was written this way), so
// the cluster it came from holds the same break.
func warnAudit(c *ucli.Context, info *node.SnapshotInfo) {
	if info.Audit.Problem == "" {
		return
	}
	fmt.Fprintf(c.App.ErrWriter, "warning: the audit journal in this snapshot does not verify at seq %d (%s); the file itself is intact, so the cluster it was taken from holds the same break: compare with 'palyra audit verify' on a live node\n",
		info.Audit.BadSeq, info.Audit.Problem)
}

func snapshotRestore(c *ucli.Context) error {
	path, err := oneArg(c, "snapshot file ('-' for stdin)")
	if err != nil {
		return err
	}
	dataDir := c.String("data-dir")
	if dataDir == "" {
		return usageErr("give the data dir to restore into with --data-dir")
	}
	f, size, err := openSnapshot(c, path)
	if err != nil {
		return err
	}
	defer f.Close()
	line := newProgress(c)
	rp := &readProgress{r: f, size: size, verb: "restoring", line: line}
	logger := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn}))
	info, err := node.Restore(c.Context, rp, node.RestoreConfig{DataDir: dataDir, Listen: c.String("listen"),
		Advertise: c.String("advertise"), Force: c.Bool("force"), Logger: logger})
	line.done()
	if err != nil {
		return fail(c, snapshotErr(err))
	}
	h := info.Header
	if c.Bool("json") {
		out := snapshotJSON(path, "", rp.n, &info.SnapshotInfo)
		out["data_dir"], out["node_id"], out["operator_id"], out["address"] = info.DataDir, info.NodeID, info.OperatorID, info.Address
		out["revoked_nodes"] = nonNil(info.Revoked)
		return writeJSON(c.App.Writer, out)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "restored cluster %q (CA %.16s…) at raft index %d into %s\n", h.ClusterName, h.CAFingerprint, h.RaftIndex, info.DataDir)
	nodes, devices := memberCounts(&info.SnapshotInfo)
	fmt.Fprintf(w, "  %d jobs, %d arrays, %s, %s, %d secrets, policy version %d, %d blobs (%s)\n",
		info.Jobs, info.Arrays, countOf(nodes, "node", "nodes"), countOf(devices, "device", "devices"), info.Secrets, info.PolicyVersion, info.Blobs, mib(info.BlobBytes))
	fmt.Fprintf(w, "  this node: %s at %s, the only voter; local operator: %s\n", info.NodeID, info.Address, info.OperatorID)
	if len(info.Revoked) > 0 {
		fmt.Fprintf(w, "  revoked the old cluster's nodes %s and their machines' local operator credentials: they hold another history; wipe those machines and join them again with new codes\n",
			strings.Join(info.Revoked, ", "))
	}
	warnMissing(c, info.Summary.MissingBlobs)
	fmt.Fprintf(w, "next:\n  palyra node start --data-dir %s --listen %s\n  palyra --data-dir %s pair create --kind node    # then 'palyra node join' on each further machine\n",
		info.DataDir, c.String("listen"), info.DataDir)
	return nil
}
