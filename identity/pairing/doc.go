// Package pairing holds the self-contained, cryptographic parts of joining a
// node or device to a cluster with a one-time code.
//
// A Code is short enough to type (P1-XXXXX-XXXXX-XXXXX-XXXXX-XXXXX). It
// carries a public ID, a 64-bit secret and a pin: a MAC of the cluster CA's
// fingerprint keyed by the secret. The joiner dials a node with
// PinnedClientTLS, which accepts the server only if the root it presents
// matches the pin, then sends the secret and a CSR inside that TLS 1.3
// session. The cluster keeps only a hash of the secret (Record) and consumes
// it through Raft with Check, which is deterministic so it can run in the FSM.
// Limiter guards the pairing endpoint against online guessing.
//
// Raft state, the RPC endpoint and the CLI live elsewhere; this package does
// no I/O of its own.
package pairing
