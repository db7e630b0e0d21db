package mesh

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// Config says where a Transport listens and how it authenticates.
type Config struct {
	// ListenAddr is the UDP host:port to bind, e.g. "127.0.0.1:7444".
	// Port 0 picks a free port; read it back with Transport.Addr.
	ListenAddr string
	// AdvertiseAddr is the host:port peers dial to reach this node; Raft and
	// memberlist publish it. Empty means ListenAddr as bound, which must then
	// not be a wildcard (0.0.0.0 or ::).
	AdvertiseAddr string
	// ServerTLS authenticates this node to callers and verifies their client
	// certificates. It must verify client certificates (ClientAuth
	// VerifyClientCertIfGiven or RequireAndVerifyClientCert, or a Verify hook);
	// peer connections without a client certificate are refused by mesh.
	// mesh sets NextProtos on its own copy; configs returned by a
	// GetConfigForClient hook must offer ALPNAPI and ALPNPeer themselves.
	ServerTLS *tls.Config
	// ClientTLS authenticates this node when dialling peers and verifies
	// them. It must carry a client certificate. mesh sets NextProtos on its
	// own copy.
	ClientTLS *tls.Config
	// Logger receives transport events; nil means slog.Default().
	Logger *slog.Logger
	// QUIC overrides quic-go settings. Zero fields get mesh's defaults
	// (handshake 5s, idle 30s, keep-alive 10s, 256 incoming streams);
	// datagrams are always enabled because gossip needs them.
	QUIC *quic.Config
	// StatelessResetKey lets peers learn at once that this node restarted
	// instead of waiting for the idle timeout. It only helps if it is the
	// same across restarts: derive it from the node's key material.
	// nil means a random key (resets work only within this process's life).
	StatelessResetKey *quic.StatelessResetKey
	// PeerFilter, when set, must accept an inbound peer-protocol connection
	// (ALPNPeer) by its verified TLS state, or the connection is closed
	// before any stream or datagram is read: e.g. only nodes, not devices,
	// may speak gossip and raft.
	PeerFilter func(tls.ConnectionState) error
	// RefuseAPI refuses API handshakes from the first packet, until
	// Transport.RefuseAPI(false): a node that does not serve yet.
	RefuseAPI bool
}

// Defaults applied to Config.QUIC fields left zero.
const (
	DefaultHandshakeIdleTimeout = 5 * time.Second
	DefaultMaxIdleTimeout       = 30 * time.Second
	DefaultKeepAlivePeriod      = 10 * time.Second
	DefaultMaxIncomingStreams   = 256
)

// validate checks the config and reports each problem with its fix.
func (c *Config) validate() error {
	if c.ListenAddr == "" {
		return errors.New("mesh: Config.ListenAddr is empty; set it to host:port, e.g. 127.0.0.1:7444 (port 0 picks a free port)")
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		return fmt.Errorf("mesh: Config.ListenAddr %q is not host:port (e.g. 127.0.0.1:7444): %w", c.ListenAddr, err)
	}
	if c.AdvertiseAddr != "" {
		if err := checkDialAddr(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("mesh: Config.AdvertiseAddr: %w", err)
		}
	}
	if err := checkServerTLS(c.ServerTLS); err != nil {
		return err
	}
	return checkClientTLS(c.ClientTLS)
}

// checkDialAddr accepts host:port with a non-zero port and a concrete host.
func checkDialAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q is not host:port (e.g. 10.0.0.5:7444): %w", addr, err)
	}
	if host == "" || port == "" || port == "0" {
		return fmt.Errorf("address %q needs a host and a non-zero port, e.g. 10.0.0.5:7444", addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("address %q is a wildcard; give an address peers can dial", addr)
	}
	return nil
}

func checkServerTLS(c *tls.Config) error {
	if c == nil {
		return errors.New("mesh: Config.ServerTLS is nil; pass the node's mTLS server config")
	}
	if len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
		return errors.New("mesh: Config.ServerTLS has no certificate; set Certificates or GetCertificate")
	}
	hook := c.VerifyPeerCertificate != nil || c.VerifyConnection != nil
	switch c.ClientAuth {
	case tls.VerifyClientCertIfGiven, tls.RequireAndVerifyClientCert:
		if c.ClientCAs == nil && !hook {
			return errors.New("mesh: Config.ServerTLS verifies client certificates but has no ClientCAs; set ClientCAs to the cluster CA pool")
		}
	case tls.RequestClientCert, tls.RequireAnyClientCert:
		if !hook {
			return errors.New("mesh: Config.ServerTLS accepts client certificates without verifying them; use tls.RequireAndVerifyClientCert with ClientCAs, or set VerifyConnection")
		}
	default:
		return errors.New("mesh: Config.ServerTLS does not ask for client certificates; set ClientAuth to tls.RequireAndVerifyClientCert (or VerifyClientCertIfGiven when unpaired API callers must reach pairing)")
	}
	return nil
}

func checkClientTLS(c *tls.Config) error {
	if c == nil {
		return errors.New("mesh: Config.ClientTLS is nil; pass the node's mTLS client config")
	}
	if len(c.Certificates) == 0 && c.GetClientCertificate == nil {
		return errors.New("mesh: Config.ClientTLS has no client certificate; peers refuse callers without one, set Certificates or GetClientCertificate")
	}
	if c.InsecureSkipVerify && c.VerifyPeerCertificate == nil && c.VerifyConnection == nil {
		return errors.New("mesh: Config.ClientTLS skips server verification; unset InsecureSkipVerify and set RootCAs, or verify in VerifyConnection")
	}
	return nil
}

// quicConfig returns the caller's overrides with mesh's defaults filled in.
func quicConfig(in *quic.Config) *quic.Config {
	var c *quic.Config
	if in != nil {
		c = in.Clone()
	} else {
		c = &quic.Config{}
	}
	c.EnableDatagrams = true
	if c.HandshakeIdleTimeout == 0 {
		c.HandshakeIdleTimeout = DefaultHandshakeIdleTimeout
	}
	if c.MaxIdleTimeout == 0 {
		c.MaxIdleTimeout = DefaultMaxIdleTimeout
	}
	if c.KeepAlivePeriod == 0 {
		c.KeepAlivePeriod = DefaultKeepAlivePeriod
	}
	if c.MaxIncomingStreams == 0 {
		c.MaxIncomingStreams = DefaultMaxIncomingStreams
	}
	return c
}

// tlsWithALPN clones c and sets its ALPN list and minimum version.
func tlsWithALPN(c *tls.Config, protos ...string) *tls.Config {
	out := c.Clone()
	out.NextProtos = protos
	out.MinVersion = tls.VersionTLS13
	return out
}
