// Package consensus is Palyra's replicated control plane: hashicorp/raft
// with raft-boltdb (bbolt) as log and stable store, and a deterministic FSM
// holding jobs (and, as the project grows, nodes, pairing state,
// revocations, policies and skills).
//
// The package takes a raft.StreamLayer from its caller and never imports
// mesh: the node wires the QUIC stream layer in, tests may use any other.
// Apply is deterministic: no clocks, randomness or map-order dependence;
// every timestamp arrives inside the command.
package consensus
