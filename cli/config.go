package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/node"
)

// deviceConfig is what `palyra device pair` stores beside the device
// credential in the config dir.
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
	tmp := filepath.Join(dir, ".config.json.tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "config.json"))
}

// credentialSource is where the CLI's identity comes from.
type credentialSource struct {
	cred *identity.Credential
	dir  string // where it is stored (for renewal)
	addr string // address recorded with it
	desc string
	// device: a paired device's credential in the config dir, which the
	// CLI renews itself (a data dir's operator credential is the node's).
	device bool
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
	if _, err := os.Stat(layout.OperatorDir()); explicit || err == nil {
		cred, err := identity.LoadCredential(layout.OperatorDir())
		if err != nil {
			return credentialSource{}, err
		}
		src := credentialSource{cred: cred, dir: layout.OperatorDir(), desc: "data dir " + layout.Dir}
		if st, err := layout.ReadState(); err == nil {
			src.addr = st.Address
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
	src := credentialSource{cred: cred, dir: deviceCredDir(dir), desc: "device config " + dir, device: true}
	if dc, err := readDeviceConfig(dir); err == nil {
		src.addr = dc.Addr
	}
	return src, nil
}
