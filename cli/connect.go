package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
)

// learnWait bounds how long a command, once done, waits for the member
// list it asked for alongside (it is usually there already: both calls
// share one connection).
const learnWait = 2 * time.Second

// dial resolves the caller's credential and the nodes to try (see
// resolveCredential), and returns a client that connects to the first of
// them that answers. The nodes are --addr/PALYRA_ADDR (one, or several
// separated by commas) when given; else every node recorded with the
// credential, the one that answered last first, and then the client also
// fetches the cluster's current member list and records it when the
// command is done, so the next command knows every node.
func dial(c *ucli.Context) (*client.Client, error) { return dialNodes(c, true) }

// dialOne is dial for commands aimed at one particular node (node leave):
// --addr, else the first recorded address, and no failover.
func dialOne(c *ucli.Context) (*client.Client, error) { return dialNodes(c, false) }

func dialNodes(c *ucli.Context, failover bool) (*client.Client, error) {
	if given := c.String("addr"); given != "" {
		for _, a := range strings.Split(given, ",") {
			if err := checkAddr(strings.TrimSpace(a)); err != nil {
				return nil, usageErr("--addr %q: %v", a, err)
			}
		}
	}
	src, err := resolveCredential(c)
	if err != nil {
		hint := "on a node's machine pass --data-dir (the node's data dir); elsewhere pair this device: palyra device pair --code CODE --peer HOST:PORT"
		if errors.Is(err, identity.ErrInsecureKeyFile) {
			hint = "fix the key's permissions with chmod 600 on the key.pem named above"
		}
		// "no credential: …" said twice ("no operator credential: no credential: …").
		why := strings.TrimPrefix(err.Error(), identity.ErrNoCredential.Error()+": ")
		return nil, fail(c, &client.Error{Code: "no_credential", Message: "no operator credential: " + why, Hint: hint})
	}
	opts := client.Options{DialTimeout: c.Duration("dial-timeout"), CallTimeout: c.Duration("call-timeout"), UnreachableHint: src.hint}
	addrs := src.addrs
	explicit := c.String("addr") != ""
	if !failover && src.device && !explicit {
		// A device's first address is whichever node answered last: a
		// command aimed at one node (node leave) would hit an arbitrary
		// one, the leader in a user trial.
		known := strings.Join(src.addrs, ", ")
		if known == "" {
			known = "none recorded"
		}
		return nil, usageErr("'palyra %s' acts on one node: from a paired device, name it with --addr HOST:PORT (this device knows %s; 'palyra nodes' lists them)", c.Command.FullName(), known)
	}
	if explicit {
		addrs = strings.Split(c.String("addr"), ",")
		opts.UnreachableHint = "check that a palyra node runs at --addr and that UDP to it is not blocked"
	}
	if len(addrs) == 0 || strings.TrimSpace(addrs[0]) == "" {
		addrs = []string{client.DefaultAddr}
	}
	if !failover {
		addrs = addrs[:1]
	}
	cl, err := client.NewCluster(addrs, src.cred, opts)
	if err != nil {
		return nil, fail(c, &client.Error{Code: "invalid_argument", Message: err.Error(), Hint: "set --addr HOST:PORT"})
	}
	watchRenewal(c, cl, src)
	// A successful call teaches the credential the cluster's nodes, with
	// --addr too: after the cluster moved, one call with --addr is what
	// brings the recorded list up to date. Not for a command aimed at one
	// node (dialOne: node leave), which reaches no further than its node.
	// (An --addr that is a tunnel is recorded first, as any address that
	// answered is; the cluster's own addresses follow it.)
	if failover && src.learn != nil {
		learnMembers(c, cl, src.learn)
	}
	return cl, nil
}

// learnMembers asks the cluster for its node addresses alongside the
// command's own calls and, when the command closes the client, records
// them with the credential (if they arrived in time and changed).
func learnMembers(c *ucli.Context, cl *client.Client, learn func(answered string, peers []string) error) {
	ctx, cancel := context.WithCancel(c.Context)
	type answer struct {
		peers []string
		err   error
	}
	got := make(chan answer, 1)
	go func() {
		peers, err := cl.Peers(ctx)
		got <- answer{peers, err}
	}()
	cl.OnClose(func() {
		defer cancel()
		t := time.NewTimer(learnWait)
		defer t.Stop()
		select {
		case a := <-got:
			if a.err == nil && len(a.peers) > 0 {
				// A node's data dir may belong to the node's user: not
				// being allowed to write there is no news on every call.
				if err := learn(cl.Answered(), a.peers); err != nil && !errors.Is(err, fs.ErrPermission) {
					fmt.Fprintf(c.App.ErrWriter, "warning: could not record the cluster's nodes: %v\n", err)
				}
			}
		case <-t.C:
		}
	})
}

// checkAddr refuses an --addr entry that cannot name a node: not
// HOST:PORT, or a port outside 1-65535 (it was dialled, and the failure
// said to check that a node runs there).
func checkAddr(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want HOST:PORT, e.g. 10.0.0.1:7444")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}
