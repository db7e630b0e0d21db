package identity

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"
)

var testALPN = []string{"palyra-test/1"}

// hsResult is one side's view of a handshake.
type hsResult struct {
	state tls.ConnectionState
	err   error
}

// handshake runs a TLS handshake over loopback TCP. The server writes one
// byte after its handshake and the client reads it, so a server-side
// rejection of the client certificate also surfaces on the client.
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) (server, client hsResult) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline := time.Now().Add(10 * time.Second)
	done := make(chan hsResult, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			done <- hsResult{err: err}
			return
		}
		defer raw.Close()
		_ = raw.SetDeadline(deadline)
		conn := tls.Server(raw, serverCfg)
		err = conn.Handshake()
		if err == nil {
			_, err = conn.Write([]byte{1})
		}
		done <- hsResult{state: conn.ConnectionState(), err: err}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(deadline)
	conn := tls.Client(raw, clientCfg)
	err = conn.Handshake()
	if err == nil {
		_, err = io.ReadFull(conn, make([]byte, 1))
	}
	client = hsResult{state: conn.ConnectionState(), err: err}
	conn.Close()
	return <-done, client
}

// foreignDevice returns a device credential from another CA that trusts our
// root, as an outsider who knows the (public) root would build it.
func foreignDevice(t *testing.T, ours *CA) *Credential {
	t.Helper()
	foreign, _ := newTestCA(t, "foreign")
	cred := issue(t, foreign, Principal{KindDevice, "d-evil"})
	cred.Roots = x509.NewCertPool()
	cred.Roots.AddCert(ours.Root())
	return cred
}

func TestTLSNodeServesDevice(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	node := issue(t, ca, Principal{KindNode, "n-1"})
	device := issue(t, ca, Principal{KindDevice, "d-1"})
	srv, cli := handshake(t, ServerTLSConfig(node, testALPN, nil), ClientTLSConfig(device, testALPN, nil))
	if srv.err != nil || cli.err != nil {
		t.Fatalf("handshake: server %v, client %v", srv.err, cli.err)
	}
	if srv.state.Version != tls.VersionTLS13 || srv.state.NegotiatedProtocol != testALPN[0] {
		t.Errorf("version %x, ALPN %q", srv.state.Version, srv.state.NegotiatedProtocol)
	}
	if p, err := PeerPrincipal(srv.state); err != nil || p != device.Principal {
		t.Errorf("server sees %v, %v; want %v", p, err, device.Principal)
	}
	if p, err := PeerPrincipal(cli.state); err != nil || p != node.Principal {
		t.Errorf("client sees %v, %v; want %v", p, err, node.Principal)
	}
}

func TestTLSNodeDialsNode(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	a := issue(t, ca, Principal{KindNode, "n-a"})
	b := issue(t, ca, Principal{KindNode, "n-b"})
	srv, cli := handshake(t, ServerTLSConfig(a, testALPN, nil), ClientTLSConfig(b, testALPN, nil))
	if srv.err != nil || cli.err != nil {
		t.Fatalf("handshake: server %v, client %v", srv.err, cli.err)
	}
	if p, _ := PeerPrincipal(srv.state); p != b.Principal {
		t.Errorf("server sees %v, want %v", p, b.Principal)
	}
}

func TestTLSServerRefusesClients(t *testing.T) {
	ca, dir := newTestCA(t, "lab")
	node := issue(t, ca, Principal{KindNode, "n-1"})
	device := issue(t, ca, Principal{KindDevice, "d-1"})

	selfCert, selfKey := selfSigned(t, "d-1", "palyra://device/d-1")
	selfSignedCred := &Credential{Leaf: selfCert, Key: selfKey, Roots: device.Roots}

	noCert := ClientTLSConfig(device, testALPN, nil)
	noCert.Certificates = nil

	expired := *device
	expired.Leaf = signLeaf(t, dir, device, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))

	cases := []struct {
		name   string
		client *tls.Config
		is     error
		want   string
	}{
		{"cert from another CA", ClientTLSConfig(foreignDevice(t, ca), testALPN, nil), ErrUntrustedPeer, "not signed by this cluster's CA"},
		{"self-signed cert with a valid principal URI", ClientTLSConfig(selfSignedCred, testALPN, nil), ErrUntrustedPeer, "not signed by this cluster's CA"},
		{"expired cert", ClientTLSConfig(&expired, testALPN, nil), ErrUntrustedPeer, "must be renewed"},
		{"no cert", noCert, nil, "didn't provide a certificate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := handshake(t, ServerTLSConfig(node, testALPN, nil), c.client)
			wantErr(t, srv.err, c.want)
			if c.is != nil && !errors.Is(srv.err, c.is) {
				t.Errorf("server err = %v, want errors.Is %v", srv.err, c.is)
			}
			if cli.err == nil {
				t.Error("client saw no error although the server refused it")
			}
		})
	}
}

func TestTLSClientRefusesServers(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	device := issue(t, ca, Principal{KindDevice, "d-1"})
	otherDevice := issue(t, ca, Principal{KindDevice, "d-2"})
	foreign, _ := newTestCA(t, "foreign")
	foreignNode := issue(t, foreign, Principal{KindNode, "n-evil"})

	cases := []struct {
		name   string
		server *Credential
		want   string
	}{
		{"node of another cluster", foreignNode, "not signed by this cluster's CA"},
		{"device posing as server", otherDevice, "not valid for use as a TLS server"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := handshake(t, ServerTLSConfig(c.server, testALPN, nil), ClientTLSConfig(device, testALPN, nil))
			if !errors.Is(cli.err, ErrUntrustedPeer) {
				t.Fatalf("client err = %v, want ErrUntrustedPeer", cli.err)
			}
			wantErr(t, cli.err, c.want)
			if srv.err == nil {
				t.Error("server saw no error although the client refused it")
			}
		})
	}
}

func TestTLSPeerCheck(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	node := issue(t, ca, Principal{KindNode, "n-1"})
	device := issue(t, ca, Principal{KindDevice, "d-1"})
	errRevoked := errors.New("revoked")
	var seen Principal
	deny := func(p Principal, leaf *x509.Certificate) error {
		seen = p
		if leaf == nil {
			return errors.New("no leaf")
		}
		return errRevoked
	}

	srv, _ := handshake(t, ServerTLSConfig(node, testALPN, deny), ClientTLSConfig(device, testALPN, nil))
	if !errors.Is(srv.err, ErrPeerRejected) || !errors.Is(srv.err, errRevoked) {
		t.Fatalf("server err = %v, want ErrPeerRejected wrapping the check's error", srv.err)
	}
	wantErr(t, srv.err, "device:d-1")
	if seen != device.Principal {
		t.Errorf("check saw %v, want %v", seen, device.Principal)
	}

	_, cli := handshake(t, ServerTLSConfig(node, testALPN, nil), ClientTLSConfig(device, testALPN, deny))
	if !errors.Is(cli.err, ErrPeerRejected) || !errors.Is(cli.err, errRevoked) {
		t.Fatalf("client err = %v, want ErrPeerRejected wrapping the check's error", cli.err)
	}
	if seen != node.Principal {
		t.Errorf("check saw %v, want %v", seen, node.Principal)
	}
}

func TestTLSRefusesOldVersionsAndMissingCredential(t *testing.T) {
	ca, _ := newTestCA(t, "lab")
	node := issue(t, ca, Principal{KindNode, "n-1"})
	device := issue(t, ca, Principal{KindDevice, "d-1"})

	old := ClientTLSConfig(device, testALPN, nil)
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	srv, _ := handshake(t, ServerTLSConfig(node, testALPN, nil), old)
	wantErr(t, srv.err, "version")

	_, cli := handshake(t, ServerTLSConfig(node, testALPN, nil), ClientTLSConfig(nil, testALPN, nil))
	if !errors.Is(cli.err, ErrNoCredential) {
		t.Errorf("client without credential: err = %v, want ErrNoCredential", cli.err)
	}
	srv, _ = handshake(t, ServerTLSConfig(&Credential{}, testALPN, nil), ClientTLSConfig(device, testALPN, nil))
	if !errors.Is(srv.err, ErrNoCredential) {
		t.Errorf("server without credential: err = %v, want ErrNoCredential", srv.err)
	}
}

func TestPeerPrincipalNeedsHandshake(t *testing.T) {
	if _, err := PeerPrincipal(tls.ConnectionState{}); err == nil {
		t.Error("PeerPrincipal before handshake: want an error")
	}
	if _, err := PeerPrincipal(tls.ConnectionState{HandshakeComplete: true}); !errors.Is(err, ErrUntrustedPeer) {
		t.Errorf("PeerPrincipal without certificates: err = %v", err)
	}
}

// signLeaf signs a copy of cred's leaf with the CA key in caDir and a chosen
// validity, which the CA itself would never issue (e.g. already expired).
func signLeaf(t *testing.T, caDir string, cred *Credential, notBefore, notAfter time.Time) *x509.Certificate {
	t.Helper()
	root, key, err := readCAFiles(caDir)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cred.Principal.ID},
		URIs:         []*url.URL{cred.Principal.uri()},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  extKeyUsages(cred.Principal.Kind),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, cred.Key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}
