package node

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/palyra-mesh/palyra/identity"
)

// initCluster turns an empty data dir into the first node of a new
// cluster: CA, node credential, local operator credential, then node.json
// last, so a crash mid-way leaves no node.json and the next start redoes
// the whole init.
func initCluster(ctx context.Context, l Layout, cfg Config) (State, error) {
	if _, err := os.Stat(l.RaftDir()); err == nil {
		return State{}, fmt.Errorf("data dir %s has raft state but no node.json; it is damaged: restore node.json from a backup, or move the directory away to start a new cluster", l.Dir)
	}
	os.Remove(l.DataKeyFile())
	for _, d := range []string{l.CADir(), l.NodeCredDir(), l.OperatorDir()} {
		if err := os.RemoveAll(d); err != nil {
			return State{}, fmt.Errorf("clear half-initialised %s: %w", d, err)
		}
	}
	ca, err := identity.InitCA(l.CADir(), cfg.ClusterName)
	if err != nil {
		return State{}, fmt.Errorf("create cluster CA: %w", err)
	}
	defer ca.Close()
	nodeP := identity.Principal{Kind: identity.KindNode, ID: identity.NewID(identity.KindNode)}
	if err := issueLocal(ctx, ca, nodeP, cfg, l.NodeCredDir()); err != nil {
		return State{}, fmt.Errorf("issue node certificate: %w", err)
	}
	opP := identity.Principal{Kind: identity.KindDevice, ID: identity.NewID(identity.KindDevice)}
	if err := issueLocal(ctx, ca, opP, cfg, l.OperatorDir()); err != nil {
		return State{}, fmt.Errorf("issue operator credential: %w", err)
	}
	key, err := newDataKey()
	if err == nil {
		err = writeDataKey(l, key)
	}
	if err != nil {
		return State{}, fmt.Errorf("create cluster data key: %w", err)
	}
	st := State{NodeID: nodeP.ID, ClusterName: cfg.ClusterName, Address: cfg.Listen, Version: 1, OperatorID: opP.ID}
	if err := l.WriteState(st); err != nil {
		return State{}, fmt.Errorf("write node state: %w", err)
	}
	cfg.Logger.Info("initialised a new cluster", "cluster", cfg.ClusterName, "node", nodeP.ID,
		"ca_fingerprint", ca.Fingerprint(), "operator", opP.String(), "data_dir", l.Dir)
	return st, nil
}

// issueLocal creates a key for p on this machine, has the CA sign its CSR
// and saves the credential in dir. The key never leaves this machine.
func issueLocal(ctx context.Context, ca *identity.CA, p identity.Principal, cfg Config, dir string) error {
	key, csr, err := identity.NewKeyAndCSR(p)
	if err != nil {
		return err
	}
	chain, err := ca.Sign(ctx, csr, p, cfg.CertTTL)
	if err != nil {
		return err
	}
	if len(chain) == 0 {
		return errors.New("CA returned no certificate")
	}
	cred := &identity.Credential{Principal: p, Leaf: chain[0], Chain: chain[1:], Key: key,
		RootCerts: []*x509.Certificate{ca.Root()}}
	return identity.SaveCredential(dir, cred)
}
