package node

import (
	"context"
	"time"

	"github.com/palyra-mesh/palyra/node/blob"
)

// replicateHeldBlobs runs once after a restore or an outage recovery
// (node.json's ReplicateBlobs): this node may then be the only holder of
// the blobs its state names, the modules, payloads and artifacts of every
// job. Once another node is alive it pushes each such blob it holds to up
// to two peers (as a fresh submission would), and clears the flag when
// all went out; until then it retries.
func (n *Node) replicateHeldBlobs(ctx context.Context) {
	if !n.state.ReplicateBlobs {
		return
	}
	changes := n.cluster.Changes()
	retry := time.NewTicker(10 * time.Second)
	defer retry.Stop()
	for {
		if len(n.blobNet.others()) > 0 {
			pushed, failed := n.pushHeldBlobs(ctx)
			if ctx.Err() != nil {
				return
			}
			if failed == 0 {
				if err := n.updateState(func(st *State) { st.ReplicateBlobs = false }); err != nil {
					n.log.Warn("blobs replicated, but node.json could not record it", "err", err)
				}
				n.log.Info("replicated the blobs this node held alone", "blobs", pushed)
				return
			}
			n.log.Warn("some blobs could not be replicated yet; retrying", "replicated", pushed, "failed", failed)
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
		case <-retry.C:
		}
	}
}

// pushHeldBlobs replicates every referenced blob held here.
func (n *Node) pushHeldBlobs(ctx context.Context) (pushed, failed int) {
	var hashes []string
	refs := n.store.State()
	if err := n.blobs.Walk(func(b blob.Info) bool {
		if refs.BlobReferenced(b.Hash) {
			hashes = append(hashes, b.Hash)
		}
		return ctx.Err() == nil
	}); err != nil {
		return 0, 1
	}
	for _, h := range hashes {
		if ctx.Err() != nil {
			return pushed, failed + 1
		}
		data, err := n.blobs.Get(h)
		if err == nil {
			_, err = n.blobNet.Put(data)
		}
		if err != nil {
			n.log.Debug("blob not replicated", "blob", h, "err", err)
			failed++
			continue
		}
		pushed++
	}
	return pushed, failed
}
