// Package identity is the cluster's certificate authority and the mTLS
// identities of its members.
//
// Every node and every paired device holds a short-lived ECDSA P-256
// certificate issued by the cluster's own CA. The certificate names exactly one
// Principal (a node or a device) in a URI SAN, so authorisation works on
// "node:n-3f9a1c2b" rather than on host names or IP addresses. Private keys are
// generated where they are used and never travel: a joiner sends a CSR.
//
// The CA wraps an embedded smallstep authority (see step.go, the only file that
// imports github.com/smallstep/certificates); everything else here uses
// crypto/x509 and crypto/tls. ServerTLSConfig and ClientTLSConfig build TLS 1.3
// configurations that verify peers against the cluster root and report
// rejections in plain words.
package identity
