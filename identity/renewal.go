package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
)

// renewalProofContext separates renewal proofs from any other signature
// the same key might make.
const renewalProofContext = "palyra renewal proof v1\x00"

func renewalDigest(csrDER []byte) []byte {
	h := sha256.New()
	h.Write([]byte(renewalProofContext))
	h.Write(csrDER)
	return h.Sum(nil)
}

// RenewalProof signs csrDER with key, the key of the certificate being
// renewed. A node that holds no CA key relays a renewal to one that does
// with the caller's certificate chain; the proof shows the signer that the
// holder of that certificate asked for this CSR, so a relay cannot have
// certificates made for anyone else.
func RenewalProof(key crypto.Signer, csrDER []byte) ([]byte, error) {
	sig, err := key.Sign(rand.Reader, renewalDigest(csrDER), crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("sign renewal proof: %w", err)
	}
	return sig, nil
}

// VerifyRenewal checks a relayed renewal: chainDER (leaf first) is the
// certificate being renewed as its holder presented it, which must verify
// under roots for client authentication now and pass check; proof must be
// its key's RenewalProof over csrDER. It returns the principal the
// certificate names: the only one the renewal may be for.
func VerifyRenewal(chainDER [][]byte, roots *x509.CertPool, csrDER, proof []byte, check PeerCheck) (Principal, error) {
	if len(chainDER) == 0 || len(proof) == 0 {
		return Principal{}, fmt.Errorf("%w: a relayed renewal needs the caller's certificate and its proof", ErrUntrustedPeer)
	}
	certs := make([]*x509.Certificate, len(chainDER))
	for i, der := range chainDER {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return Principal{}, fmt.Errorf("%w: relayed certificate %d: %v", ErrUntrustedPeer, i+1, err)
		}
		certs[i] = c
	}
	p, err := verifyPeer(certs, roots, x509.ExtKeyUsageClientAuth, "", check)
	if err != nil {
		return Principal{}, err
	}
	pub, ok := certs[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || !ecdsa.VerifyASN1(pub, renewalDigest(csrDER), proof) {
		return Principal{}, fmt.Errorf("%w: the renewal proof is not %s's signature over this request", ErrUntrustedPeer, p)
	}
	return p, nil
}

// Fingerprint is the lower-case hex SHA-256 of a certificate's DER: how
// pairing codes, the trust bundle and the CLI name a root.
func Fingerprint(der []byte) string { return fingerprintOf(der) }

func fingerprintOf(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// IssuingRoot returns the root among roots whose key signed cert (a leaf
// signed directly by a root, as every leaf here is), or nil.
func IssuingRoot(cert *x509.Certificate, roots []*x509.Certificate) *x509.Certificate {
	for _, r := range roots {
		if cert.CheckSignatureFrom(r) == nil {
			return r
		}
	}
	return nil
}
