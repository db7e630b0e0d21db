package node

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/palyra-mesh/palyra/node/blob"
)

// Blob collection defaults: how often each node looks, and how old an
// unreferenced blob must be before it goes. The grace covers a blob
// stored for a job whose commit is still on its way (a module or input
// replicated before acceptance, an output before its result), and a
// replica still catching up with the log that names it.
const (
	defaultBlobGCInterval = time.Minute
	defaultBlobGCGrace    = 10 * time.Minute
)

// blobRefs says whether the replicated state still names a blob.
type blobRefs interface{ BlobReferenced(hash string) bool }

// collectBlobs deletes, once, the local blobs that no job or array names
// and that were stored more than grace ago. It returns how many it
// deleted and their bytes.
func collectBlobs(store *blob.Store, refs blobRefs, now time.Time, grace time.Duration) (n int, bytes int64, err error) {
	var doomed []blob.Info
	err = store.Walk(func(b blob.Info) bool {
		if now.Sub(b.ModTime) >= grace && !refs.BlobReferenced(b.Hash) {
			doomed = append(doomed, b)
		}
		return true
	})
	for _, b := range doomed {
		if refs.BlobReferenced(b.Hash) { // named meanwhile
			continue
		}
		deleted, derr := store.DeleteIfOlder(b.Hash, now.Add(-grace)) // not if renewed since the walk
		if derr != nil {
			err = derr
			continue
		}
		if !deleted {
			continue
		}
		n++
		bytes += b.Size
	}
	return n, bytes, err
}

// runBlobGC collects unreferenced blobs every interval until ctx ends.
func (n *Node) runBlobGC(ctx context.Context) {
	interval, grace := n.cfg.BlobGCInterval, n.cfg.BlobGCGrace
	if interval <= 0 {
		interval = defaultBlobGCInterval
	}
	if grace <= 0 {
		grace = defaultBlobGCGrace
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		count, size, err := collectBlobs(n.blobs, n.store.State(), time.Now(), grace)
		if err != nil {
			n.log.Warn("blob collection", "err", err)
		}
		if count > 0 {
			n.log.Info("collected unreferenced blobs", "blobs", count, "bytes", size)
		}
	}
}

// releaseMemory hands memory back to the OS after retention pruned many
// jobs at once: the Go runtime returns freed heap only gradually, and an
// operator watching RSS after a large prune expects it to drop.
func (n *Node) releaseMemory(ctx context.Context) {
	const every, drop = 5 * time.Second, 10_000
	t := time.NewTicker(every)
	defer t.Stop()
	last := n.store.State().JobCount()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := n.store.State().JobCount()
		if last-now >= drop {
			debug.FreeOSMemory()
		}
		last = now
	}
}
