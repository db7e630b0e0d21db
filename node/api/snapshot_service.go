package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/identity/policy"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// Snapshotter makes cluster snapshots: it writes a whole snapshot file
// (node/backup's format) to w, reporting progress now and then.
type Snapshotter interface {
	SaveSnapshot(ctx context.Context, caller string, w io.Writer, progress func(*palyrav1.SnapshotProgress)) error
}

// SnapshotRedirect is the error a Snapshotter returns when another node
// must make the snapshot (this one does not hold the cluster CA).
type SnapshotRedirect struct{ NodeID, Address string }

func (r *SnapshotRedirect) Error() string {
	return fmt.Sprintf("this node does not hold the cluster CA; %s at %s does", r.NodeID, r.Address)
}

// snapshotChunk is the size of the file chunks streamed to the caller.
const snapshotChunk = 1 << 20

// progressEvery bounds how often progress is streamed.
const progressEvery = 500 * time.Millisecond

type snapshotService struct{ s *Server }

func (ss snapshotService) SaveSnapshot(ctx context.Context, _ *connect.Request[palyrav1.SaveSnapshotRequest], stream *connect.ServerStream[palyrav1.SaveSnapshotResponse]) error {
	s := ss.s
	if err := s.authz.Check(ctx, policy.ActionSnapshotSave, policy.ClusterResource(), nil); err != nil {
		return err
	}
	if s.Snapshots == nil {
		return apiError(connect.CodeUnimplemented, "unimplemented", "this node does not make snapshots", "")
	}
	caller, _ := PrincipalFrom(ctx)
	cw := &chunkWriter{stream: stream, buf: make([]byte, 0, snapshotChunk)}
	var last time.Time
	progress := func(p *palyrav1.SnapshotProgress) {
		if cw.err != nil || (p.Phase != "done" && time.Since(last) < progressEvery) {
			return
		}
		last = time.Now()
		cw.err = stream.Send(&palyrav1.SaveSnapshotResponse{Progress: p})
	}
	start := time.Now()
	err := s.Snapshots.SaveSnapshot(ctx, caller.String(), cw, progress)
	var redirect *SnapshotRedirect
	if errors.As(err, &redirect) {
		return stream.Send(&palyrav1.SaveSnapshotResponse{RedirectAddress: redirect.Address, RedirectNodeId: redirect.NodeID})
	}
	if err == nil {
		err = cw.flush()
	}
	if err != nil {
		s.log.Warn("snapshot save failed", "by", caller, "err", err)
		if cw.err != nil && ctx.Err() != nil {
			return apiError(connect.CodeCanceled, "canceled", "the caller went away during the snapshot", "")
		}
		return fromErr(err)
	}
	s.log.Info("snapshot saved", "by", caller, "bytes", cw.sent, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// chunkWriter streams what is written to it in chunks of snapshotChunk.
type chunkWriter struct {
	stream *connect.ServerStream[palyrav1.SaveSnapshotResponse]
	buf    []byte
	sent   int64
	err    error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && w.err == nil {
		c := min(len(p), snapshotChunk-len(w.buf))
		w.buf = append(w.buf, p[:c]...)
		p, n = p[c:], n+c
		if len(w.buf) == snapshotChunk {
			w.err = w.flush()
		}
	}
	return n, w.err
}

func (w *chunkWriter) flush() error {
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	if err := w.stream.Send(&palyrav1.SaveSnapshotResponse{Chunk: w.buf}); err != nil {
		w.err = fmt.Errorf("send snapshot: %w", err)
		return w.err
	}
	w.sent += int64(len(w.buf))
	w.buf = w.buf[:0] // Send has marshalled the message
	return nil
}
