package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/mesh"
)

// nodePrincipal returns the node principal at the other end of a mesh
// stream, or an error if the peer is not a node (a device, or a conn mesh
// did not make). Only nodes may speak raft, gossip and peer RPC.
func nodePrincipal(p mesh.PeerInfo) (identity.Principal, error) {
	pr, err := identity.PeerPrincipal(p.TLS)
	if err != nil {
		return identity.Principal{}, err
	}
	if pr.Kind != identity.KindNode {
		return pr, fmt.Errorf("%s is not a node: only nodes may use %s streams", pr, p.Tag)
	}
	return pr, nil
}

func connPrincipal(c net.Conn) (identity.Principal, error) {
	p, ok := mesh.Peer(c)
	if !ok {
		return identity.Principal{}, fmt.Errorf("connection from %s was not made by mesh; its peer is unknown", c.RemoteAddr())
	}
	return nodePrincipal(p)
}

// NodeOnlyLayer wraps mesh's raft stream layer so that Accept hands raft
// only streams from node principals; streams from anyone else (a paired
// device, say) are closed and logged. Pass it as consensus.Config.Layer:
//
//	Layer: cluster.NodeOnlyLayer(transport.RaftLayer(), logger)
func NodeOnlyLayer(l raft.StreamLayer, log *slog.Logger) raft.StreamLayer {
	if log == nil {
		log = slog.Default()
	}
	return &nodeOnlyLayer{StreamLayer: l, log: log}
}

type nodeOnlyLayer struct {
	raft.StreamLayer
	log *slog.Logger
}

func (l *nodeOnlyLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.StreamLayer.Accept()
		if err != nil {
			return nil, err
		}
		if _, err := connPrincipal(c); err != nil {
			l.log.Warn("refused raft stream", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			continue
		}
		return c, nil
	}
}

// nodeOnlyGossip filters memberlist's inbound streams (joins and push/pull
// state exchanges) to node principals. Gossip packets ride QUIC datagrams,
// which mesh only accepts on connections that presented a certificate of
// the cluster CA; see DESIGN.md for that remaining gap.
type nodeOnlyGossip struct {
	memberlist.NodeAwareTransport
	mesh    *mesh.Transport
	log     *slog.Logger
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func newNodeOnlyGossip(m *mesh.Transport, log *slog.Logger) *nodeOnlyGossip {
	g := &nodeOnlyGossip{NodeAwareTransport: m.MemberlistTransport(), mesh: m, log: log,
		streams: make(chan net.Conn), done: make(chan struct{})}
	g.wg.Add(1)
	go g.pump()
	return g
}

func (g *nodeOnlyGossip) pump() {
	defer g.wg.Done()
	in := g.NodeAwareTransport.StreamCh()
	for {
		select {
		case <-g.done:
			return
		case c := <-in:
			if _, err := connPrincipal(c); err != nil {
				g.log.Warn("refused gossip stream", "remote", c.RemoteAddr().String(), "err", err)
				c.Close()
				continue
			}
			select {
			case g.streams <- c:
			case <-g.done:
				c.Close()
				return
			case <-time.After(10 * time.Second):
				c.Close() // memberlist is not reading: shutting down
			}
		}
	}
}

func (g *nodeOnlyGossip) StreamCh() <-chan net.Conn { return g.streams }

// DialTimeout opens a gossip stream that Shutdown aborts, so a join to a
// dead address does not hold up Close for the whole timeout.
func (g *nodeOnlyGossip) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	select {
	case <-g.done:
		return nil, mesh.ErrClosed
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		select {
		case <-g.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return g.mesh.OpenStream(ctx, addr, mesh.TagGossip)
}

func (g *nodeOnlyGossip) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return g.DialTimeout(a.Addr, timeout)
}

func (g *nodeOnlyGossip) Shutdown() error {
	err := g.NodeAwareTransport.Shutdown()
	g.once.Do(func() { close(g.done) })
	g.wg.Wait()
	return err
}
