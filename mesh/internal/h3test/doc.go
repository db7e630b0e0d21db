// Package h3test holds mesh's HTTP/3 round-trip test. It lives apart from
// package mesh because quic-go/http3 needs modules (qpack) that only the
// node, which serves the API, must have in go.mod.
package h3test
