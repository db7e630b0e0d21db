// Package mesh is the node's single-UDP-port QUIC transport. One UDP socket
// and one quic.Transport carry everything a node says or hears: the API
// (HTTP/3, ALPN "h3"), Raft, memberlist gossip and peer-to-peer streams
// (ALPN "palyra-peer/1"). Every connection is mutually authenticated TLS 1.3;
// mesh takes the tls.Configs from its caller and never decides who is trusted.
//
// Peer streams start with a one-byte Tag that routes them to their consumer:
// RaftLayer for Raft, MemberlistTransport for gossip, AcceptStream for the
// rest. Gossip packets travel as QUIC datagrams. SetFault injects partitions
// for in-process tests. See DESIGN.md for the reasons behind these choices.
package mesh

import "fmt"

// ALPN protocol names negotiated in the TLS handshake. They split the one UDP
// port into the API (served by an HTTP/3 server) and the peer protocol
// (tagged streams and datagrams, served by mesh itself).
const (
	ALPNAPI  = "h3"
	ALPNPeer = "palyra-peer/1"
)

// Tag is the first byte of every peer stream; it names the stream's protocol.
// All tags are allocated here so that two packages can never collide.
type Tag byte

// Tags used by mesh itself (served by RaftLayer and MemberlistTransport).
const (
	TagRaft         Tag = 1 // hashicorp/raft RPC streams
	TagGossip       Tag = 2 // memberlist push/pull and fallback probe streams
	TagGossipPacket Tag = 3 // one gossip packet too large for a datagram
	// TagProbe is never served: a live peer refuses it (resets the
	// stream), whatever its version, which proves it still holds the
	// connection (Transport.answers).
	TagProbe Tag = 4
)

// Tags for upper layers, consumed with AcceptStream.
const (
	TagRPC  Tag = 16 // peer RPC that is not the public API
	TagBlob Tag = 17 // content-addressed blob transfer
	TagJob  Tag = 18 // job assignment push from the leader
)

// internal reports whether the tag is consumed inside mesh.
func (t Tag) internal() bool {
	return t == TagRaft || t == TagGossip || t == TagGossipPacket || t == TagProbe
}

// String names well-known tags and prints others as numbers.
func (t Tag) String() string {
	switch t {
	case TagRaft:
		return "raft"
	case TagGossip:
		return "gossip"
	case TagGossipPacket:
		return "gossip-packet"
	case TagProbe:
		return "probe"
	case TagRPC:
		return "rpc"
	case TagBlob:
		return "blob"
	case TagJob:
		return "job"
	}
	return fmt.Sprintf("tag(%d)", byte(t))
}
