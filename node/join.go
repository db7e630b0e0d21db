package node

import (
	"errors"
	"fmt"
	"slices"

	"github.com/palyra-mesh/palyra/identity"
)

// PrepareJoin records a freshly paired node in an empty data dir: its
// credential (key made on this machine) and a node.json that marks it as
// joined, with the seeds to contact (each once, in the order given). The
// next Start joins the cluster.
func PrepareJoin(dataDir string, cred *identity.Credential, clusterName string, seeds []string, dataKey []byte) error {
	l := Layout{Dir: dataDir}
	if _, err := l.ReadState(); err == nil {
		return fmt.Errorf("data dir %s already holds a node; start it with 'palyra node start', or use another --data-dir", dataDir)
	} else if !errors.Is(err, ErrNoState) {
		return err
	}
	if cred.Principal.Kind != identity.KindNode {
		return fmt.Errorf("credential is for a %s, not a node", cred.Principal.Kind)
	}
	if _, err := makePrivate(dataDir); err != nil {
		return err
	}
	if err := writeDataKey(l, dataKey); err != nil {
		return fmt.Errorf("the cluster sent no usable data key: %w", err)
	}
	if err := identity.SaveCredential(l.NodeCredDir(), cred); err != nil {
		return err
	}
	var uniq []string
	for _, s := range seeds {
		if !slices.Contains(uniq, s) {
			uniq = append(uniq, s)
		}
	}
	return l.WriteState(State{NodeID: cred.Principal.ID, ClusterName: clusterName, Version: 1, Seeds: uniq, Joined: true})
}

// SaveLocalOperator stores the local operator credential a joining node
// got for its machine, so the CLI works there with --data-dir (and the
// node renews it like its own). Call it before PrepareJoin, whose
// node.json is what makes the join count.
func SaveLocalOperator(dataDir string, cred *identity.Credential) error {
	if cred.Principal.Kind != identity.KindDevice {
		return fmt.Errorf("a local operator credential is for a device, not a %s", cred.Principal.Kind)
	}
	if _, err := makePrivate(dataDir); err != nil {
		return err
	}
	return identity.SaveCredential(Layout{Dir: dataDir}.OperatorDir(), cred)
}
