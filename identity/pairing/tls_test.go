package pairing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/identity"
)

const testALPN = "palyra-pair-test"

// serve runs a TLS server with cfg on loopback until the test ends; handle
// (if not nil) runs on each connection after its handshake.
func serve(t *testing.T, cfg *tls.Config, handle func(*tls.Conn)) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				tc := conn.(*tls.Conn)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				if tc.Handshake() == nil && handle != nil {
					handle(tc)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial completes a handshake with PinnedClientTLS(c).
func dial(t *testing.T, addr string, c Code) (*tls.Conn, error) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, PinnedClientTLS(c, []string{testALPN}))
	if err == nil {
		t.Cleanup(func() { _ = conn.Close() })
	}
	return conn, err
}

// pairingServer is ServerTLS for a fresh node of ca.
func pairingServer(t *testing.T, ca *identity.CA) *tls.Config {
	t.Helper()
	cfg, err := ServerTLS(issue(t, ca, identity.KindNode), []string{testALPN})
	if err != nil {
		t.Fatalf("ServerTLS: %v", err)
	}
	return cfg
}

func TestPinnedClientAcceptsItsCluster(t *testing.T) {
	ca := newCA(t, "home")
	addr := serve(t, pairingServer(t, ca), nil)
	conn, err := dial(t, addr, mustNew(t, identity.KindNode, ca.Fingerprint()))
	if err != nil {
		t.Fatalf("handshake with the pinned cluster: %v", err)
	}
	cs := conn.ConnectionState()
	if cs.NegotiatedProtocol != testALPN || cs.Version != tls.VersionTLS13 {
		t.Fatalf("ALPN %q, version %x; want %q over TLS 1.3", cs.NegotiatedProtocol, cs.Version, testALPN)
	}
	root, err := ServerRoot(cs)
	if err != nil || !root.Equal(ca.Root()) {
		t.Fatalf("ServerRoot = %v, %v; want the cluster root", root, err)
	}
}

func TestPinnedClientRefusesOtherCluster(t *testing.T) {
	home, other := newCA(t, "home"), newCA(t, "other")
	addr := serve(t, pairingServer(t, other), nil)
	_, err := dial(t, addr, mustNew(t, identity.KindNode, home.Fingerprint()))
	if !errors.Is(err, ErrPinMismatch) {
		t.Fatalf("handshake with another cluster: err = %v, want ErrPinMismatch", err)
	}
	wantErr(t, err, "server's CA fingerprint does not match the pairing code: this is not the cluster that made the code", `"other root CA"`)
}

func TestPinnedClientRefusesLeafOnly(t *testing.T) {
	ca := newCA(t, "home")
	cred := issue(t, ca, identity.KindNode)
	// The ordinary mTLS config sends only the leaf.
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cred.TLSCertificate()}, NextProtos: []string{testALPN}}
	_, err := dial(t, serve(t, cfg, nil), mustNew(t, identity.KindNode, ca.Fingerprint()))
	if !errors.Is(err, identity.ErrUntrustedPeer) {
		t.Fatalf("leaf-only server: err = %v, want ErrUntrustedPeer", err)
	}
	wantErr(t, err, "only its own certificate, not its cluster's root")
}

func TestPinnedClientRefusesBadChains(t *testing.T) {
	home, other := newCA(t, "home"), newCA(t, "other")
	code := mustNew(t, identity.KindNode, home.Fingerprint())
	foreign := issue(t, other, identity.KindNode)
	device := issue(t, home, identity.KindDevice)
	tests := []struct {
		name  string
		cert  tls.Certificate
		parts []string
	}{
		// The right root after a leaf it did not issue.
		{"foreign leaf", tls.Certificate{Certificate: [][]byte{foreign.Leaf.Raw, home.Root().Raw}, PrivateKey: foreign.Key}, []string{"not a server certificate of the pinned cluster"}},
		// Devices have no ServerAuth and may not serve.
		{"device leaf", tls.Certificate{Certificate: [][]byte{device.Leaf.Raw, home.Root().Raw}, PrivateKey: device.Key}, []string{"not a server certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{tt.cert}, NextProtos: []string{testALPN}}
			_, err := dial(t, serve(t, cfg, nil), code)
			if !errors.Is(err, identity.ErrUntrustedPeer) || errors.Is(err, ErrPinMismatch) {
				t.Fatalf("err = %v, want ErrUntrustedPeer (the pin matches)", err)
			}
			wantErr(t, err, tt.parts...)
		})
	}
}

func TestVerifyPinnedChecks(t *testing.T) {
	ca := newCA(t, "home")
	cred := issue(t, ca, identity.KindNode)
	code := mustNew(t, identity.KindNode, ca.Fingerprint())
	chain := []*x509.Certificate{cred.Leaf, ca.Root()}
	if _, err := verifyPinned(code, chain, time.Now()); err != nil {
		t.Fatalf("valid chain: %v", err)
	}
	_, err := verifyPinned(code, chain, cred.Leaf.NotAfter.Add(time.Hour))
	wantErr(t, err, "check this machine's clock")
	_, err = verifyPinned(code, nil, time.Now())
	wantErr(t, err, "no certificate")
	_, err = verifyPinned(Code{}, chain, time.Now())
	wantErr(t, err, "without a pairing code")
	// A pinned "root" that is not a CA: here the leaf pinned by its own code.
	leafAsRoot := mustNew(t, identity.KindNode, fmt.Sprintf("%x", sha256Sum(cred.Leaf.Raw)))
	_, err = verifyPinned(leafAsRoot, []*x509.Certificate{cred.Leaf, cred.Leaf}, time.Now())
	wantErr(t, err, "is not a CA certificate")
}

func TestServerTLSRejectsIncompleteCredentials(t *testing.T) {
	ca, other := newCA(t, "home"), newCA(t, "other")
	if _, err := ServerTLS(nil, nil); !errors.Is(err, identity.ErrNoCredential) {
		t.Fatalf("nil credential: err = %v, want ErrNoCredential", err)
	}
	_, err := ServerTLS(issue(t, ca, identity.KindDevice), nil)
	wantErr(t, err, "needs a node certificate")
	noRoot := issue(t, ca, identity.KindNode)
	noRoot.RootCerts = []*x509.Certificate{other.Root()}
	if _, err := ServerTLS(noRoot, nil); !errors.Is(err, identity.ErrNoCredential) {
		t.Fatalf("credential without its root: err = %v, want ErrNoCredential", err)
	}
}

func TestNewCredentialChecksReply(t *testing.T) {
	ca, other := newCA(t, "home"), newCA(t, "other")
	p := identity.Principal{Kind: identity.KindDevice, ID: identity.NewID(identity.KindDevice)}
	key, csr, err := identity.NewKeyAndCSR(p)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ca.Sign(context.Background(), csr, p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	der := [][]byte{chain[0].Raw}
	cred, err := NewCredential(key, der, ca.Root())
	if err != nil {
		t.Fatalf("NewCredential: %v", err)
	}
	if cred.Principal != p || !cred.RootCerts[0].Equal(ca.Root()) {
		t.Fatalf("credential for %s under %v", cred.Principal, cred.RootCerts)
	}
	otherKey, _, _ := identity.NewKeyAndCSR(p)
	_, err = NewCredential(otherKey, der, ca.Root())
	wantErr(t, err, "not for this joiner's key")
	_, err = NewCredential(key, der, other.Root())
	wantErr(t, err, "does not verify under the pinned CA")
	_, err = NewCredential(key, nil, ca.Root())
	wantErr(t, err, "no certificate")
	_, err = NewCredential(key, [][]byte{[]byte("junk")}, ca.Root())
	wantErr(t, err, "certificate 1")
}

// TestPairingFlow runs the whole exchange the way the endpoint will: the
// joiner checks the server by the pin, sends its secret and CSR, the
// server checks and consumes the record and signs; the joiner's new
// credential then passes the cluster's ordinary mTLS.
func TestPairingFlow(t *testing.T) {
	ca := newCA(t, "home")
	node := issue(t, ca, identity.KindNode)
	code := mustNew(t, identity.KindDevice, ca.Fingerprint())
	rec, err := code.Record("node:"+node.Principal.ID, time.Now().UnixMilli(), 0)
	if err != nil {
		t.Fatal(err)
	}
	records := make(chan map[string]Record, 1) // the "Raft state", one user at a time
	records <- map[string]Record{rec.ID: rec}

	srvCfg, err := ServerTLS(node, []string{testALPN})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srvCfg, func(conn *tls.Conn) {
		id, _ := readFrame(conn)
		secret, _ := readFrame(conn)
		csr, err := readFrame(conn)
		if err != nil {
			return
		}
		state := <-records
		r, ok := state[string(id)]
		if !ok {
			records <- state
			_ = writeFrame(conn, []byte("error: "+ErrUnknownCode.Error()))
			return
		}
		if err := Check(r, secret, time.Now().UnixMilli()); err != nil {
			records <- state
			_ = writeFrame(conn, []byte("error: "+err.Error()))
			return
		}
		delete(state, r.ID)
		records <- state
		// The joiner names itself; the record decides the kind (and the
		// cluster would refuse an ID already registered).
		req, err := x509.ParseCertificateRequest(csr)
		if err != nil {
			_ = writeFrame(conn, []byte("error: "+err.Error()))
			return
		}
		p := identity.Principal{Kind: identity.Kind(r.Kind), ID: req.Subject.CommonName}
		chain, err := ca.Sign(context.Background(), csr, p, time.Hour)
		if err != nil {
			_ = writeFrame(conn, []byte("error: "+err.Error()))
			return
		}
		_ = writeFrame(conn, chain[0].Raw)
	})

	join := func() (*identity.Credential, error) {
		conn, err := dial(t, addr, code)
		if err != nil {
			return nil, err
		}
		root, err := ServerRoot(conn.ConnectionState())
		if err != nil {
			return nil, err
		}
		key, csr, err := identity.NewKeyAndCSR(identity.Principal{Kind: code.Kind(), ID: identity.NewID(code.Kind())})
		if err != nil {
			return nil, err
		}
		for _, f := range [][]byte{[]byte(code.IDString()), code.Secret(), csr} {
			if err := writeFrame(conn, f); err != nil {
				return nil, err
			}
		}
		reply, err := readFrame(conn)
		if err != nil {
			return nil, err
		}
		if len(reply) > 6 && string(reply[:6]) == "error:" {
			return nil, errors.New(string(reply))
		}
		return NewCredential(key, [][]byte{reply}, root)
	}

	cred, err := join()
	if err != nil {
		t.Fatalf("pairing: %v", err)
	}
	if cred.Principal.Kind != identity.KindDevice {
		t.Fatalf("paired as %s, want a device", cred.Principal)
	}
	// The new credential is a member: mTLS to the node works.
	mtls := serve(t, identity.ServerTLSConfig(node, []string{"palyra-test"}, nil), nil)
	c, err := tls.Dial("tcp", mtls, identity.ClientTLSConfig(cred, []string{"palyra-test"}, nil))
	if err != nil {
		t.Fatalf("mTLS with the paired credential: %v", err)
	}
	_ = c.Close()

	// The code was consumed: a second join fails.
	_, err = join()
	wantErr(t, err, "not known to this cluster")
}

// writeFrame and readFrame are the test's wire format: a 2-byte length and
// the bytes.
func writeFrame(w io.Writer, b []byte) error {
	if err := binary.Write(w, binary.BigEndian, uint16(len(b))); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n uint16
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// During a CA rotation a node presents its new-root leaf, the
// cross-certificate and both roots: a code made before the rotation (old
// pin) and one made after (new pin) both verify it, a stranger's does not,
// and the joiner's credential from such a reply trusts the whole bundle.
func TestVerifyPinnedDuringARotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	old, err := identity.InitCA(dir, "lab")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	kr, err := identity.OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	nw, err := kr.Create("lab")
	if err != nil {
		t.Fatal(err)
	}
	cross, err := old.CrossSign(nw.Root())
	if err != nil {
		t.Fatal(err)
	}
	leaf := issue(t, nw, identity.KindNode).Leaf
	presented := []*x509.Certificate{leaf, cross, old.Root(), nw.Root()}
	for _, ca := range []*identity.CA{old, nw} {
		root, err := verifyPinned(mustNew(t, identity.KindNode, ca.Fingerprint()), presented, time.Now())
		if err != nil || !root.Equal(ca.Root()) {
			t.Fatalf("pin %s: %v, %v", ca.Root().Subject.CommonName, root, err)
		}
	}
	_, err = verifyPinned(mustNew(t, identity.KindNode, newCA(t, "other").Fingerprint()), presented, time.Now())
	if !errors.Is(err, ErrPinMismatch) {
		t.Fatalf("stranger's pin: %v", err)
	}

	p := identity.Principal{Kind: identity.KindDevice, ID: "d-0000ab01"}
	key, csr, _ := identity.NewKeyAndCSR(p)
	chain, err := nw.Sign(context.Background(), csr, p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := NewCredential(key, [][]byte{chain[0].Raw, cross.Raw}, old.Root(), nw.Root())
	if err != nil {
		t.Fatalf("credential pinned to the old root with a new-root leaf: %v", err)
	}
	if len(cred.RootCerts) != 2 {
		t.Fatalf("credential trusts %d roots, want the bundle's 2", len(cred.RootCerts))
	}
}
