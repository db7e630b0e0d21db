package node

import (
	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node/cluster"
)

// BlobPushes reports how many times this node offered a blob to a peer
// (asked whether it holds it and, if not, sent it): the cost of replicating.
func (n *Node) BlobPushes() int64 { return n.blobNet.pushes.Load() }

// PutBlobWithDeadPeer stores data as a blob with a peer that never
// answers (at addr) among the nodes it is pushed to, with room for
// background pushes left after a Put returns, and says how many pushes
// were still under way when Put returned and how many second copies it
// dropped.
func (n *Node) PutBlobWithDeadPeer(data []byte, addr string, background int) (hash string, inflight, dropped int64, err error) {
	b := newBlobNet(n.blobs, n.transport, n.blobNet.self, func() []cluster.Member {
		return append([]cluster.Member{{ID: "n-deadpeer", Address: addr, State: cluster.StateAlive}}, n.cluster.Members()...)
	}, n.log)
	b.background = make(chan struct{}, background)
	hash, err = b.Put(data)
	return hash, b.inflight.Load(), b.dropped.Load(), err
}

// StateForTest is the node's replica of the state.
func (n *Node) StateForTest() *consensus.State { return n.store.State() }

// RaftForTest is the node's raft (tests register observers on it).
func (n *Node) RaftForTest() *raft.Raft { return n.store.Raft() }

// SnapshotForTest makes raft take a snapshot now.
func (n *Node) SnapshotForTest() error { return n.store.Raft().Snapshot().Error() }

// HoldsBlob reports whether this node's blob store holds h.
func (n *Node) HoldsBlob(h string) bool { return n.blobs.Has(h) }

// CAKeysForTest lists the fingerprints of the CA roots whose keys this node holds.
func (n *Node) CAKeysForTest() []string { return n.keeper.kr.Fingerprints() }

// CredentialForTest is the credential this node presents now.
func (n *Node) CredentialForTest() *identity.Credential { return n.cred.Current() }

// CompiledForTest reports whether this node's wasm executor holds module h.
func (n *Node) CompiledForTest(h string) bool { return n.wasm.Holds(h) }

// RunHereForTest is this node's palyra_jobs_run_here_total, by outcome.
func (n *Node) RunHereForTest() (recorded, dropped float64) {
	read := func(outcome string) float64 {
		var m dto.Metric
		n.metrics.runHere.WithLabelValues(outcome).Write(&m)
		return m.GetCounter().GetValue()
	}
	return read("recorded"), read("dropped")
}

// OfferedSlotsForTest is the wasm slots this node's scheduler would
// count on node id now (its workers view; -1: not listed).
func (n *Node) OfferedSlotsForTest(id string) int {
	for _, w := range n.workers() {
		if w.ID == id {
			return w.Slots["wasm"]
		}
	}
	return -1
}
