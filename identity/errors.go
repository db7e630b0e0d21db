package identity

import "errors"

// Sentinel errors, for errors.Is. Each returned error carries a message that
// says what went wrong and what to do; these only classify it.
var (
	// ErrNoCA: the directory holds no cluster CA.
	ErrNoCA = errors.New("no cluster CA")
	// ErrCAExists: InitCA refused to overwrite an existing CA.
	ErrCAExists = errors.New("cluster CA already exists")
	// ErrNoCredential: the directory holds no node or device credential.
	ErrNoCredential = errors.New("no credential")
	// ErrInsecureKeyFile: a private key file is readable by group or others.
	ErrInsecureKeyFile = errors.New("private key file is readable by group or others")
	// ErrBadCSR: a certificate signing request was malformed, badly signed,
	// or asked for names other than the principal being signed for.
	ErrBadCSR = errors.New("bad certificate signing request")
	// ErrBadPrincipal: a principal (kind or ID) is not valid.
	ErrBadPrincipal = errors.New("bad principal")
	// ErrUntrustedPeer: a TLS peer's certificate did not verify against the
	// cluster root, or named no valid principal.
	ErrUntrustedPeer = errors.New("untrusted peer")
	// ErrNoSigner: this node holds no key of the cluster's active CA root;
	// the request goes to a node that does (a voter).
	ErrNoSigner = errors.New("this node holds no key of the cluster's active CA root")
	// ErrPeerRejected: a PeerCheck hook refused an otherwise valid peer.
	ErrPeerRejected = errors.New("peer rejected")
)
