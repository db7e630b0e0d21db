package cli

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
)

// renewKey is where dial leaves, in the app's metadata, what renewAfter
// needs to renew the device credential a command used.
const renewKey = "palyra.renew"

type renewal struct {
	src credentialSource
	// addr is the node that answered the command (read after it ran):
	// the first address tried may be down, and the renewal waited for it
	// to time out before failing.
	addr func() string
	seen func() []*x509.Certificate // the node's certificates from the handshake
}

// watchRenewal arranges for the device credential src to be renewed after
// the command, if it turns out to be due (see deviceDue). Node data-dir
// credentials are left to the node, which renews them itself.
func watchRenewal(c *ucli.Context, cl *client.Client, src credentialSource) {
	if !src.device {
		return
	}
	if c.App.Metadata == nil {
		c.App.Metadata = map[string]any{}
	}
	c.App.Metadata[renewKey] = &renewal{src: src, addr: cl.Reached, seen: cl.ObserveServer()}
}

// deviceDue reports why a device credential should be renewed, or "": two
// thirds into its lifetime, the node's certificate comes from another root
// (a CA rotation), or the node trusts other roots than this credential.
func deviceDue(cred *identity.Credential, server []*x509.Certificate) string {
	if time.Now().After(identity.RenewAt(cred.Leaf)) {
		return "two thirds into its lifetime"
	}
	if len(server) == 0 {
		return ""
	}
	if mine := identity.IssuingRoot(cred.Leaf, cred.RootCerts); mine == nil || server[0].CheckSignatureFrom(mine) != nil {
		return "the cluster's nodes have moved to a new CA root"
	}
	var theirs []string
	for _, c := range server[1:] {
		if c.IsCA && c.CheckSignatureFrom(c) == nil {
			theirs = append(theirs, identity.Fingerprint(c.Raw))
		}
	}
	var ours []string
	for _, r := range cred.RootCerts {
		ours = append(ours, identity.Fingerprint(r.Raw))
	}
	slices.Sort(theirs)
	slices.Sort(ours)
	if len(theirs) > 0 && !slices.Equal(theirs, ours) {
		return "the cluster's trust bundle changed"
	}
	return ""
}

// renewAfter runs after every command: it renews the device credential the
// command used when it is due, over a new connection to the same node, and
// saves it. It never fails the command; a renewal that fails is retried
// after the next command and reported on stderr.
func renewAfter(c *ucli.Context) error {
	r, _ := c.App.Metadata[renewKey].(*renewal)
	if r == nil {
		return nil
	}
	delete(c.App.Metadata, renewKey)
	if deviceDue(r.src.cred, r.seen()) == "" {
		return nil
	}
	unlock, ok := lockRenewal(r.src.dir)
	if !ok {
		return nil // another palyra process is renewing it right now
	}
	defer unlock()
	cred, err := identity.LoadCredential(r.src.dir)
	if err != nil {
		return nil
	}
	why := deviceDue(cred, r.seen())
	if why == "" {
		return nil // renewed meanwhile by another process
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(r.addr(), cred)
	if err != nil {
		return nil
	}
	defer cl.Close()
	fresh, err := cl.Renew(ctx, cred)
	if err == nil {
		err = identity.SaveCredential(r.src.dir, fresh)
	}
	if err != nil {
		fmt.Fprintf(c.App.ErrWriter, "warning: could not renew this device's certificate (%s; it expires %s): %v\n",
			why, cred.Leaf.NotAfter.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// lockRenewal takes a non-blocking exclusive lock beside the credential
// directory, so two palyra processes never save over each other.
func lockRenewal(credDir string) (func(), bool) {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(credDir), "renew.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, true
}
