// Package node is the composition root of a Palyra node: it opens the data
// dir, creates or loads the cluster identity, listens on one UDP port for
// QUIC, starts the Raft store, the worker and (while leader) the scheduler,
// and serves the API over HTTP/3. Sub-packages hold the parts: api,
// scheduler (pure placement), worker, blob.
package node
