package cli

import (
	"fmt"
	goruntime "runtime"
	"runtime/debug"

	ucli "github.com/urfave/cli/v2"
)

// buildInfo is what `palyra version` reports: the release, and the commit
// and Go toolchain the binary was built from (from the module build info
// the go command records; "unknown" for a binary built outside a
// checkout).
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Commit is the git commit, set at build time by the Makefile with
// -ldflags (the go command's own VCS stamp is used when it is empty).
var Commit = ""

func readBuildInfo() buildInfo {
	b := buildInfo{Version: Version, Commit: "unknown", GoVersion: goruntime.Version(), Platform: goruntime.GOOS + "/" + goruntime.GOARCH}
	if Commit != "" {
		b.Commit = Commit
		return b
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
}

// versionLine is the one-line form `palyra --version` prints.
func versionLine() string {
	b := readBuildInfo()
	commit := b.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if b.Modified {
		commit += "+modified"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s)", b.Version, commit, b.GoVersion, b.Platform)
}

// --version prints what 'palyra version' prints (it said "palyra version
// 0.1.0-dev (…)", the command "palyra 0.1.0-dev (…)").
func init() {
	ucli.VersionPrinter = func(c *ucli.Context) { fmt.Fprintln(c.App.Writer, "palyra "+versionLine()) }
}

func versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print the version, the commit it was built from and the Go toolchain",
		Flags: []ucli.Flag{jsonFlag},
		Action: func(c *ucli.Context) error {
			if c.Bool("json") {
				return writeJSON(c.App.Writer, readBuildInfo())
			}
			fmt.Fprintln(c.App.Writer, "palyra "+versionLine())
			return nil
		},
	}
}

// nodeVersion is the version a node gossips and 'palyra nodes' shows: the
// release and, when known, the commit (two builds of one release differ
// during a rolling upgrade from one commit to the next).
func nodeVersion() string {
	b := readBuildInfo()
	if b.Commit == "" || b.Commit == "unknown" {
		return b.Version
	}
	c := b.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if b.Modified {
		c += ".modified"
	}
	return b.Version + "+" + c
}
