package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
)

// NewKeyAndCSR generates an ECDSA P-256 key and a CSR for p signed with it.
// The key stays with the caller; only the CSR (DER) goes to the CA.
func NewKeyAndCSR(p Principal) (crypto.Signer, []byte, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate P-256 key: %w", err)
	}
	csr, err := CSRFor(key, p)
	if err != nil {
		return nil, nil, err
	}
	return key, csr, nil
}

// CSRFor is a CSR for p signed with an existing key: a node renews its
// certificate on the key it has, so that peers that have not seen the new
// certificate's record yet know it by its key (the certificate ledger).
func CSRFor(key crypto.Signer, p Principal) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: p.ID},
		URIs:    []*url.URL{p.uri()},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("create CSR for %s: %w", p, err)
	}
	return csr, nil
}

// isP256 reports whether pub is an ECDSA P-256 public key, the only key type
// the cluster issues certificates for.
func isP256(pub crypto.PublicKey) bool {
	k, ok := pub.(*ecdsa.PublicKey)
	return ok && k.Curve == elliptic.P256()
}

// samePublicKey reports whether a and b are the same public key.
func samePublicKey(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}

// encodeKeyPEM encodes key as a PKCS#8 "PRIVATE KEY" PEM block.
func encodeKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// decodeKeyPEM reads a private key from a PKCS#8 "PRIVATE KEY" or SEC 1
// "EC PRIVATE KEY" PEM block.
func decodeKeyPEM(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block is %q, want \"PRIVATE KEY\"", block.Type)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", key)
	}
	return signer, nil
}

// encodeCertsPEM encodes certs as consecutive "CERTIFICATE" PEM blocks.
func encodeCertsPEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// decodeCertsPEM parses every "CERTIFICATE" block in data; it fails if there
// is none or if anything else is in the file.
func decodeCertsPEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want \"CERTIFICATE\"", len(certs)+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
		data = rest
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}
