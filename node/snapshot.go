package node

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/api"
	"github.com/palyra-mesh/palyra/node/backup"
	"github.com/palyra-mesh/palyra/node/blob"
	"github.com/palyra-mesh/palyra/node/cluster"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// SaveSnapshot writes a snapshot of the whole cluster to w (the format of
// node/backup): the cluster's keys, the replicated state as raft
// snapshots it at one index, and every blob that state names, fetched
// from this node or its peers. It needs the cluster CA, which the file
// carries; a node without it answers with an *api.SnapshotRedirect to one
// that holds it. See backup/DESIGN.md.
func (n *Node) SaveSnapshot(ctx context.Context, caller string, w io.Writer, progress func(*palyrav1.SnapshotProgress)) error {
	if progress == nil {
		progress = func(*palyrav1.SnapshotProgress) {}
	}
	ca := n.keeper.activeCA(n.keeper.trust())
	if ca == nil {
		return n.caHolder()
	}
	rootDER, keyDER, err := n.keeper.kr.Export(ca.Fingerprint())
	if err != nil {
		return fmt.Errorf("read the cluster CA: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rootDER})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	// Everything acknowledged before this call is in the local replica
	// once the read index is applied; raft then snapshots at least that.
	if err := n.cluster.VerifyRead(ctx); err != nil {
		return snapshotNeedsQuorum(err)
	}
	meta, rc, err := n.store.TakeSnapshot()
	if err != nil {
		return err
	}
	defer rc.Close()

	bw := backup.NewWriter(w)
	hdr := backup.Header{ClusterName: n.state.ClusterName, CAFingerprint: ca.Fingerprint(), CreatedAt: time.Now().UTC(),
		CreatedBy: caller, ServedBy: n.state.NodeID, Version: n.cfg.Version, RaftIndex: meta.Index, RaftTerm: meta.Term,
		StateBytes: meta.Size}
	for _, s := range meta.Servers {
		hdr.Servers = append(hdr.Servers, backup.Server{ID: s.ID, Address: s.Address, Voter: s.Voter})
	}
	report := func(phase string, done, total int) {
		progress(&palyrav1.SnapshotProgress{Phase: phase, Bytes: uint64(bw.Bytes()), StateBytes: uint64(meta.Size),
			BlobsDone: uint64(done), BlobsTotal: uint64(total), RaftIndex: meta.Index, RaftTerm: meta.Term})
	}
	if err := bw.Header(hdr); err != nil {
		return err
	}
	if err := bw.Keys(backup.Keys{CACertPEM: certPEM, CAKeyPEM: keyPEM, DataKey: n.dataKey}); err != nil {
		return err
	}
	report("state", 0, 0)
	// The state is scanned as it is copied: the scan names the blobs to
	// carry, exactly those of this state, and checks every record.
	contents, err := consensus.ScanSnapshot(io.TeeReader(rc, &reportWriter{w: bw, every: 4 << 20, report: func() { report("state", 0, 0) }}))
	if err != nil {
		return fmt.Errorf("snapshot state: %w", err)
	}
	if err := bw.EndState(); err != nil {
		return err
	}
	sum := backup.Summary{AppliedIndex: contents.AppliedIndex, Jobs: contents.Jobs, Arrays: contents.Arrays,
		JobsByPhase: map[string]uint64{}, Secrets: contents.Secrets, PolicyVersion: contents.PolicyVersion}
	for p, c := range contents.JobsByPhase {
		sum.JobsByPhase[p.String()] = c
	}
	for _, m := range contents.Members {
		switch m.Kind {
		case "node":
			sum.Nodes++
		case "device":
			sum.Devices++
		}
	}
	total := len(contents.Blobs)
	report("blobs", 0, total)
	for i, h := range contents.Blobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := n.blobForSnapshot(ctx, h)
		if errors.Is(err, blob.ErrNotFound) {
			n.log.Warn("snapshot: a blob the state names is on no reachable node; the jobs naming it are saved without it", "blob", h, "err", err)
			sum.MissingBlobs = append(sum.MissingBlobs, h)
			continue
		}
		if err != nil {
			return fmt.Errorf("snapshot blob %s: %w", h, err)
		}
		if err := bw.Blob(h, data); err != nil {
			return err
		}
		sum.Blobs++
		sum.BlobBytes += int64(len(data))
		report("blobs", i+1, total)
	}
	sort.Strings(sum.MissingBlobs)
	if err := bw.Close(sum); err != nil {
		return err
	}
	report("done", total, total)
	n.log.Info("snapshot taken", "by", caller, "raft_index", meta.Index, "jobs", sum.Jobs, "blobs", sum.Blobs,
		"missing_blobs", len(sum.MissingBlobs), "bytes", bw.Bytes())
	return nil
}

// caHolder names a live node that holds the key of the active CA root
// (every voter does, once it has fetched it).
func (n *Node) caHolder() error {
	if a, ok := n.keeper.trust().Active(); ok {
		for _, m := range n.cluster.Members() {
			if m.ID != n.state.NodeID && m.State == cluster.StateAlive && slices.Contains(strings.Split(m.Labels[api.LabelCAKeys], ","), prefix(a.Fingerprint)) {
				return &api.SnapshotRedirect{NodeID: m.ID, Address: m.Address}
			}
		}
	}
	return &consensus.Error{Code: "no_ca",
		Message: fmt.Sprintf("a snapshot carries the cluster CA, and no live node holding it is known (this node, %s, does not)", n.state.NodeID),
		Hint:    "run 'palyra nodes' and point --addr at a voter (voters hold the CA key)"}
}

// blobForSnapshot reads a blob from this node, else from a peer, without
// keeping a copy here (a snapshot would otherwise gather every blob of
// the cluster on the node that makes it).
func (n *Node) blobForSnapshot(ctx context.Context, h string) ([]byte, error) {
	data, err := n.blobs.Get(h)
	if err == nil || !errors.Is(err, blob.ErrNotFound) {
		return data, err
	}
	var errs []error
	for _, m := range n.blobNet.others() {
		data, ferr := n.blobNet.fetch(ctx, m.Address, h)
		if ferr == nil {
			return data, nil
		}
		errs = append(errs, ferr)
	}
	return nil, fmt.Errorf("%w: %s on no reachable node (%v)", blob.ErrNotFound, h, errors.Join(errs...))
}

// snapshotNeedsQuorum says, for a no-quorum error, that a snapshot cannot
// be taken from a replica that may lag (there is no --stale for it) and
// what works instead; other errors pass unchanged.
func snapshotNeedsQuorum(err error) error {
	var ce *consensus.Error
	if !errors.As(err, &ce) || ce.Code != consensus.ErrNoQuorum.Code {
		return err
	}
	return &consensus.Error{Code: ce.Code,
		Message: "a snapshot needs a quorum (it must hold every write the cluster acknowledged): " + ce.Message,
		Hint: ce.Hint + "; --stale does not apply to a snapshot. If a majority of voters is lost for good, " +
			"make the most up-to-date survivor a cluster of one ('palyra node recover --data-dir D --dry-run', then --yes, on the stopped node) and save the snapshot there"}
}

// reportWriter passes writes on and calls report every so many bytes.
type reportWriter struct {
	w      io.Writer
	every  int64
	since  int64
	report func()
}

func (r *reportWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if r.since += int64(n); r.since >= r.every {
		r.since = 0
		r.report()
	}
	return n, err
}
