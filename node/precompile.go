package node

import (
	"context"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
)

// precompileModules compiles, in the background, the wasm modules that
// unfinished jobs anywhere in the cluster run and that this node's
// executor does not hold yet, so that its first job of a module does not
// pay for the compilation (about a second for a 2.5 MB Go module on a
// 2-core machine) while it holds a slot. The node that accepted a module
// compiled it when it validated it; the others used to compile it on
// their first run of it.
//
// It follows the state's module index (consensus.State.LiveModules), woken
// only when a module gets its first unfinished job, and compiles one module
// at a time. The bytes come from this node's blob store or a peer's. A
// node that may not take work (drained, made ineligible) compiles nothing.
// A module that fails to fetch or compile is not tried again while it
// stays live: its jobs compile it when they run, as before, and report
// what is wrong with it.
func (n *Node) precompileModules(ctx context.Context) {
	st := n.store.State()
	tried := map[string]bool{}
	for {
		changed := st.Watch(consensus.TopicModules)
		live := st.LiveModules()
		next := make(map[string]bool, len(live))
		for _, h := range live {
			next[h] = tried[h]
		}
		tried = next
		for _, h := range live {
			if ctx.Err() != nil {
				return
			}
			if tried[h] || n.wasm.Holds(h) {
				continue
			}
			tried[h] = true
			if m, ok := st.Member("node", n.state.NodeID); ok && (m.Ineligible || m.Draining) {
				continue
			}
			n.precompile(ctx, h)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// precompile fetches module hash and compiles it into the executor's cache.
func (n *Node) precompile(ctx context.Context, hash string) {
	start := time.Now()
	data, err := n.blobNet.GetContext(ctx, hash) // shutdown does not wait for a peer
	if err != nil {
		n.log.Debug("could not fetch a module to compile it ahead of its jobs", "module", hash, "err", err)
		return
	}
	if err := n.wasm.Validate(ctx, data); err != nil {
		n.log.Debug("compiling a module ahead of its jobs failed; its jobs will say why", "module", hash, "err", err)
		return
	}
	n.log.Debug("compiled a module ahead of its jobs", "module", hash, "bytes", len(data), "took", time.Since(start))
}
