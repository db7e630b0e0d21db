package client

import (
	"errors"
	"fmt"
	"testing"
)

// A node still starting refuses the API's protocol in the handshake: a
// caller (node join) may wait for it; other failures are not that.
func TestNodeStarting(t *testing.T) {
	starting := fmt.Errorf("dial 127.0.0.1:7444: %w", errors.New("CRYPTO_ERROR 0x178 (remote): tls: no application protocol"))
	if !NodeStarting(starting) {
		t.Error("a starting node's refusal is not recognised")
	}
	for _, err := range []error{nil, errors.New("CRYPTO_ERROR 0x12a (remote): tls: bad certificate"), errors.New("timeout: no recent network activity")} {
		if NodeStarting(err) {
			t.Errorf("%v taken for a starting node", err)
		}
	}
}
