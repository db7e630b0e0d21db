package api

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"testing"
)

// A certificate's principal and serial are read once and then answered
// from the cache, for that certificate only; a certificate that names no
// principal is refused every time, never remembered.
func TestPeerCacheIdentifiesEachCertificate(t *testing.T) {
	cert := func(kind, id string, serial int64) *x509.Certificate {
		c := &x509.Certificate{Subject: pkix.Name{CommonName: id}, SerialNumber: big.NewInt(serial)}
		if kind != "" {
			c.URIs = []*url.URL{{Scheme: "palyra", Host: kind, Path: "/" + id}}
		}
		return c
	}
	state := func(c *x509.Certificate) tls.ConnectionState {
		return tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{c}}
	}
	var pc peerCache
	a, b := cert("device", "d-1a2b3c4d", 7), cert("node", "n-99999999", 8)
	for round := 0; round < 2; round++ {
		for _, tc := range []struct {
			c            *x509.Certificate
			want, serial string
		}{{a, "device:d-1a2b3c4d", "7"}, {b, "node:n-99999999", "8"}} {
			id, err := pc.identify(state(tc.c))
			if err != nil || id.principal.String() != tc.want || id.serial != tc.serial {
				t.Fatalf("round %d: %v %q %v, want %s serial %s", round, id.principal, id.serial, err, tc.want, tc.serial)
			}
		}
	}
	if len(pc.m) != 2 {
		t.Fatalf("%d certificates remembered, want 2", len(pc.m))
	}
	bad := cert("", "d-1a2b3c4d", 9)
	for i := 0; i < 2; i++ {
		if _, err := pc.identify(state(bad)); err == nil {
			t.Fatal("a certificate without a principal URI was accepted")
		}
	}
	if _, err := pc.identify(tls.ConnectionState{HandshakeComplete: true}); err == nil {
		t.Fatal("a connection without a certificate was identified")
	}
	if len(pc.m) != 2 {
		t.Fatalf("%d certificates remembered after refusals, want 2", len(pc.m))
	}
}
