package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
)

// dial resolves the node address and the caller's credential (see
// resolveCredential), and returns a client. The address comes from
// --addr/PALYRA_ADDR, else the one recorded with the credential, else the
// default.
func dial(c *ucli.Context) (*client.Client, error) {
	src, err := resolveCredential(c)
	if err != nil {
		hint := "on a node's machine pass --data-dir (the node's data dir); elsewhere pair this device: palyra device pair --code CODE --peer HOST:PORT"
		if errors.Is(err, identity.ErrInsecureKeyFile) {
			hint = "fix the key's permissions with chmod 600 on the key.pem named above"
		}
		return nil, fail(c, &client.Error{Code: "no_credential", Message: fmt.Sprintf("no operator credential: %v", err), Hint: hint})
	}
	addr := c.String("addr")
	if addr == "" {
		addr = src.addr
	}
	if addr == "" {
		addr = client.DefaultAddr
	}
	cl, err := client.New(addr, src.cred)
	if err != nil {
		return nil, fail(c, &client.Error{Code: "invalid_argument", Message: err.Error(), Hint: "set --addr HOST:PORT"})
	}
	watchRenewal(c, cl, src)
	return cl, nil
}
