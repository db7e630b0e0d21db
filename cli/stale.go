package cli

import ucli "github.com/urfave/cli/v2"

// staleRead reports whether the command should read the serving node's
// replica without a quorum round trip: --stale given to the command
// itself or to any command above it, the global flag included (so
// PALYRA_STALE too). c.Bool("stale") alone reads only the nearest
// command that defines the flag: under 'kv', whose commands have their
// own --stale, it never saw the global one.
func staleRead(c *ucli.Context) bool {
	for _, cc := range c.Lineage() {
		if cc.Bool("stale") {
			return true
		}
	}
	return false
}
