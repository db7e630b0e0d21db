package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
)

// dial resolves the node address and the caller's credential, and returns
// a client. The address comes from --addr/PALYRA_ADDR, else from the data
// dir's node.json, else the default; the credential is the data dir's
// local operator credential.
func dial(c *ucli.Context) (*client.Client, error) {
	layout := node.Layout{Dir: c.String("data-dir")}
	addr := c.String("addr")
	if addr == "" {
		if st, err := layout.ReadState(); err == nil && st.Address != "" {
			addr = st.Address
		} else {
			addr = client.DefaultAddr
		}
	}
	cred, err := identity.LoadCredential(layout.OperatorDir())
	if err != nil {
		hint := fmt.Sprintf("run this on the node's machine with --data-dir pointing at its data dir (now %q), or start a node there with 'palyra node start'", layout.Dir)
		if errors.Is(err, identity.ErrInsecureKeyFile) {
			hint = "fix the key's permissions: chmod 600 " + layout.OperatorDir() + "/key.pem"
		}
		return nil, fail(c, &client.Error{Code: "no_credential", Message: fmt.Sprintf("no operator credential: %v", err), Hint: hint})
	}
	cl, err := client.New(addr, cred)
	if err != nil {
		return nil, fail(c, &client.Error{Code: "invalid_argument", Message: err.Error(), Hint: "set --addr HOST:PORT"})
	}
	return cl, nil
}
