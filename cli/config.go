package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
)

// deviceConfig is what `palyra device pair` stores beside the device
// credential in the config dir. Addr is tried first (the node that
// answered last), then Peers; both are refreshed from the cluster's member
// list after a successful call, so the device follows the membership.
type deviceConfig struct {
	Addr        string   `json:"addr"`
	Peers       []string `json:"peers,omitempty"`
	ClusterName string   `json:"cluster_name"`
	Principal   string   `json:"principal"`
}

func configDir(c *ucli.Context) string {
	if d := c.String("config-dir"); d != "" {
		return d
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".config", "palyra")
	}
	return ".palyra"
}

func deviceCredDir(dir string) string { return filepath.Join(dir, "credential") }

func readDeviceConfig(dir string) (deviceConfig, error) {
	var dc deviceConfig
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return dc, err
	}
	if err := json.Unmarshal(data, &dc); err != nil {
		return dc, fmt.Errorf("corrupt %s: %w", filepath.Join(dir, "config.json"), err)
	}
	return dc, nil
}

func writeDeviceConfig(dir string, dc deviceConfig) error {
	data, err := json.MarshalIndent(dc, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSynced(filepath.Join(dir, "config.json"), append(data, '\n'))
}

// writeFileSynced replaces path with data atomically and durably (temp
// file, fsync, rename, fsync of the directory).
func writeFileSynced(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// credentialSource is where the CLI's identity comes from, and where it
// finds the cluster.
type credentialSource struct {
	cred *identity.Credential
	dir  string // where it is stored (for renewal)
	desc string
	// device: a paired device's credential in the config dir, which the
	// CLI renews itself (a data dir's operator credential is the node's).
	device bool
	// addrs are the node addresses to try, in order; hint is what to do
	// when none answers; learn records what a successful call taught
	// about the cluster's nodes (the address that answered, and all).
	addrs []string
	hint  string
	learn func(answered string, peers []string) error
}

// learnedPeers is the file in a node's data dir where the CLI keeps the
// cluster's node addresses it learned (the node owns node.json).
func learnedPeersFile(l node.Layout) string { return filepath.Join(l.Dir, "cli-peers.json") }

type learnedPeers struct {
	Peers []string `json:"peers"`
}

// resolveCredential picks the caller's credential: the data dir's local
// operator credential when --data-dir/PALYRA_DATA_DIR is given or
// ./palyra-data exists, else the device credential from the config dir.
func resolveCredential(c *ucli.Context) (credentialSource, error) {
	dataDir := c.String("data-dir")
	explicit := c.IsSet("data-dir") && dataDir != ""
	if dataDir == "" {
		dataDir = "palyra-data"
	}
	layout := node.Layout{Dir: dataDir}
	if _, statErr := os.Stat(layout.OperatorDir()); explicit || statErr == nil {
		if explicit && errors.Is(statErr, fs.ErrNotExist) {
			// A mistyped --data-dir, or one of a node that has no local
			// operator: say which, and that a paired device goes without it.
			what := "holds no operator credential (no operator/ in it)"
			if _, err := os.Stat(layout.Dir); errors.Is(err, fs.ErrNotExist) {
				what = "does not exist"
			}
			return credentialSource{}, fmt.Errorf("%w: --data-dir %s %s; check the path, or leave --data-dir out to use this device's paired credential (in %s)", identity.ErrNoCredential, layout.Dir, what, configDir(c))
		}
		cred, err := identity.LoadCredential(layout.OperatorDir())
		if err != nil {
			return credentialSource{}, err
		}
		src := credentialSource{cred: cred, dir: layout.OperatorDir(), desc: "data dir " + layout.Dir,
			hint: fmt.Sprintf("start this machine's node with 'palyra node start --data-dir %s' (it resumes its cluster), or pass --addr HOST:PORT of another running node", layout.Dir)}
		if st, err := layout.ReadState(); err == nil {
			src.addrs = append(src.addrs, st.Address)
			src.addrs = append(src.addrs, st.Seeds...)
		}
		var lp learnedPeers
		if data, err := os.ReadFile(learnedPeersFile(layout)); err == nil && json.Unmarshal(data, &lp) == nil {
			src.addrs = append(src.addrs, lp.Peers...)
		}
		src.learn = func(_ string, peers []string) error {
			if slices.Equal(peers, lp.Peers) {
				return nil
			}
			data, err := json.MarshalIndent(learnedPeers{Peers: peers}, "", "  ")
			if err != nil {
				return err
			}
			return writeFileSynced(learnedPeersFile(layout), append(data, '\n'))
		}
		return src, nil
	}
	dir := configDir(c)
	cred, err := identity.LoadCredential(deviceCredDir(dir))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, identity.ErrNoCredential) {
		return credentialSource{}, fmt.Errorf("%w: no node data dir here (%s) and no paired device in %s", identity.ErrNoCredential, layout.Dir, dir)
	}
	if err != nil {
		return credentialSource{}, err
	}
	src := credentialSource{cred: cred, dir: deviceCredDir(dir), desc: "device config " + dir, device: true,
		hint: "check that the cluster's nodes are running and that UDP to them is not blocked from here, or pass --addr HOST:PORT of a running node (this device tries every node it knows, and learns them anew on each successful call)"}
	dc, err := readDeviceConfig(dir)
	if err == nil {
		src.addrs = append([]string{dc.Addr}, dc.Peers...)
		src.learn = func(answered string, peers []string) error {
			if answered == dc.Addr && slices.Equal(peers, dc.Peers) {
				return nil
			}
			dc.Addr, dc.Peers = answered, peers
			return writeDeviceConfig(dir, dc)
		}
	}
	return src, nil
}
