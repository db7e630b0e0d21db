package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func deviceCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "device",
		Usage: "pair this machine as an operator device; list and revoke devices",
		Subcommands: []*ucli.Command{
			{
				Name:  "pair",
				Usage: "pair this machine with a cluster using a one-time code",
				Description: `Makes a key on this machine (it never leaves it), proves the code to the node
   at --peer after checking that node against the CA pinned in the code, and
   stores the device credential in --config-dir/PALYRA_CONFIG_DIR
   (~/.config/palyra). Afterwards every palyra command on this machine uses it,
   and renews its certificate after the command when it is due: two thirds
   into its lifetime, or when the cluster moved to a new CA root ('palyra ca
   rotate'). A certificate left to expire cannot be renewed: pair again.

   --peer may be any node of the cluster; one that holds no CA key relays
   the request to a voter.`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "code", Required: true, Usage: "the code printed by 'palyra pair create --kind device'"},
					&ucli.StringFlag{Name: "peer", Required: true, Usage: "a node's address HOST:PORT"},
					&ucli.StringFlag{Name: "name", Usage: "a label for this device (default: the code's name, from 'pair create --name', else the host name)"},
					&ucli.BoolFlag{Name: "force", Usage: "replace a device credential already stored in the config dir"},
					jsonFlag,
				},
				Action: devicePair,
			},
			{
				Name: "list", Usage: "list paired devices", Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Identity.ListDevices(c.Context, connect.NewRequest(&palyrav1.ListDevicesRequest{}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						out := []map[string]any{}
						for _, d := range resp.Msg.Devices {
							out = append(out, map[string]any{"id": d.Id, "name": d.Name, "operator": d.Operator, "revoked": d.Revoked,
								"added_at": msTime(d.AddedAtMs), "revoked_at": msTime(d.RevokedAtMs), "added_by": d.AddedBy})
						}
						return writeJSON(c.App.Writer, map[string]any{"devices": out})
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tNAME\tOPERATOR\tSTATE\tADDED")
					for _, d := range resp.Msg.Devices {
						state := "active"
						if d.Revoked {
							state = "revoked"
						}
						fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", d.Id, printableText(d.Name), d.Operator, state, msTime(d.AddedAtMs))
					}
					return tw.Flush()
				},
			},
			{
				Name: "revoke", Usage: "revoke a device: every node refuses it from then on", ArgsUsage: "ID",
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					return revokeMember(c, "device")
				},
			},
		},
	}
}

func revokeMember(c *ucli.Context, kind string) error {
	id, err := oneArg(c, kind+" id")
	if err != nil {
		return err
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Identity.RevokeMember(c.Context, connect.NewRequest(&palyrav1.RevokeMemberRequest{Kind: kind, Id: id}))
	if err != nil && strings.Contains(cl.Explain(err).Message, "is already revoked") {
		// What was asked holds: revoking twice is not a failure (a script
		// that runs again, an operator making sure).
		if c.Bool("json") {
			return writeJSON(c.App.Writer, map[string]any{"kind": kind, "id": id, "revoked": true, "already": true})
		}
		fmt.Fprintf(c.App.Writer, "%s %s was already revoked\n", kind, id)
		return nil
	}
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{"kind": kind, "id": resp.Msg.Member.GetId(), "revoked": resp.Msg.Member.GetRevoked()})
	}
	fmt.Fprintf(c.App.Writer, "%s %s revoked\n", kind, id)
	return nil
}

func devicePair(c *ucli.Context) error {
	code, err := pairing.Parse(c.String("code"))
	if err != nil {
		return fail(c, &client.Error{Code: "invalid_code", Message: err.Error(), Hint: "copy the code exactly as 'palyra pair create' printed it"})
	}
	if code.Kind() != identity.KindDevice {
		return fail(c, &client.Error{Code: "invalid_code", Message: "this is a node code", Hint: "use it with 'palyra node join', or create a device code with 'palyra pair create --kind device'"})
	}
	dir := configDir(c)
	if _, err := os.Stat(deviceCredDir(dir)); err == nil && !c.Bool("force") {
		return fail(c, &client.Error{Code: "exists", Message: "a device credential is already stored in " + dir,
			Hint: "pass --force to replace it, or use another --config-dir"})
	}
	// The device's --name, else the code's name (pair create --name),
	// else the host name: the host name won over the code's before.
	host, _ := os.Hostname()
	peer, err := peerFlag(c)
	if err != nil {
		return err
	}
	cred, resp, err := client.Pair(c.Context, peer, code, client.PairOptions{Name: c.String("name"), HostName: host})
	if err != nil {
		return fail(c, explainPair(peer, err))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := identity.SaveCredential(deviceCredDir(dir), cred); err != nil {
		return err
	}
	if err := writeDeviceConfig(dir, deviceConfig{Addr: peer, Peers: resp.Peers, ClusterName: resp.ClusterName, Principal: resp.Principal}); err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{"principal": resp.Principal, "cluster_name": resp.ClusterName,
			"config_dir": dir, "expires_at": cred.Leaf.NotAfter.UTC().Format(time.RFC3339)})
	}
	fmt.Fprintf(c.App.Writer, "paired as %s with cluster %q; credential stored in %s\n", resp.Principal, resp.ClusterName, dir)
	return nil
}

// explainPair gives pairing failures their hint: a joiner reaches the
// cluster through --peer, and never starts a cluster of its own.
func explainPair(peer string, err error) *client.Error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		ce = (&client.Client{Addr: peer}).Explain(err)
	}
	if ce.Code == "unreachable" {
		e := *ce
		e.Hint = "check that a node of the cluster runs at " + peer + " and that UDP to it is not blocked from here; --peer takes the HOST:PORT a node listens on ('palyra nodes' on a paired machine lists them)"
		return &e
	}
	return ce
}

// peerFlag is --peer as HOST:PORT: a bare host gets the default port
// (7444), and the user is told.
func peerFlag(c *ucli.Context) (string, error) {
	peer := strings.TrimSpace(c.String("peer"))
	if peer == "" {
		return "", ucli.Exit("error: --peer is required\ngive the HOST:PORT of a running node of the cluster", exitUsage)
	}
	if _, _, err := net.SplitHostPort(peer); err != nil {
		if strings.Count(peer, ":") > 1 && !strings.HasPrefix(peer, "[") { // a bare IPv6 address
			peer = "[" + peer + "]"
		}
		withPort := peer + ":7444"
		if _, _, err := net.SplitHostPort(withPort); err != nil {
			return "", ucli.Exit(fmt.Sprintf("error: --peer %q is not HOST:PORT\ngive the address a node listens on, e.g. 10.0.0.1:7444", c.String("peer")), exitUsage)
		}
		fmt.Fprintf(c.App.ErrWriter, "--peer %s has no port; using %s (the default)\n", c.String("peer"), withPort)
		peer = withPort
	}
	return peer, nil
}
