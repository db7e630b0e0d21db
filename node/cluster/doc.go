// Package cluster turns single nodes into a self-managing cluster: gossip
// (memberlist over mesh) finds members and detects failures, Raft holds the
// truth about who votes, and an autopilot on the leader keeps a target number
// of voters among healthy nodes.
//
// It also gives every node the same write and read path whatever its role:
// Apply commits locally on the leader and forwards the command to the leader
// from a follower; VerifyRead makes a follower's local state linearizable with
// a read index from the leader. Nodes talk to each other over one small
// request/response protocol on mesh.TagRPC, and only node principals may call
// it. See DESIGN.md for why it is built this way.
package cluster
