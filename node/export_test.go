package node

// BlobPushes reports how many times this node offered a blob to a peer
// (asked whether it holds it and, if not, sent it): the cost of replicating.
func (n *Node) BlobPushes() int64 { return n.blobNet.pushes.Load() }
