package cli

import (
	"log/slog"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/node"
)

func nodeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "node",
		Usage: "run and manage nodes",
		Subcommands: []*ucli.Command{{
			Name:  "start",
			Usage: "run a node in the foreground",
			Description: `The first start on an empty data dir creates a new cluster: its CA, this
   node's key and certificate, a single-voter Raft, and a local operator
   credential (data-dir/operator) for the CLI on this machine. Later starts
   resume from disk. SIGINT/SIGTERM stop the node cleanly.

   Everything (API, Raft, gossip) is QUIC with mutual TLS on one UDP port.`,
			Flags: []ucli.Flag{
				&ucli.StringFlag{Name: "listen", Usage: "UDP `HOST:PORT` for QUIC", Value: node.DefaultListen, EnvVars: []string{"PALYRA_LISTEN"}},
				&ucli.StringFlag{Name: "log-format", Usage: "log format: text or json", Value: "text", EnvVars: []string{"PALYRA_LOG_FORMAT"}},
				&ucli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: "info", EnvVars: []string{"PALYRA_LOG_LEVEL"}},
				&ucli.IntFlag{Name: "wasm-slots", Usage: "wasm jobs run at once on this node (default 2 × CPUs)", EnvVars: []string{"PALYRA_WASM_SLOTS"}},
				&ucli.StringFlag{Name: "cluster-name", Usage: "name of a new cluster (first start only)", Value: "palyra"},
			},
			Action: func(c *ucli.Context) error {
				logger, err := newLogger(c.App.ErrWriter, c.String("log-format"), c.String("log-level"))
				if err != nil {
					return usageErr("%v", err)
				}
				cfg := node.Config{
					DataDir:     c.String("data-dir"),
					Listen:      c.String("listen"),
					ClusterName: c.String("cluster-name"),
					Logger:      logger,
					Version:     Version,
					WasmSlots:   c.Int("wasm-slots"),
				}
				if err := node.Run(c.Context, cfg); err != nil {
					logger.Error("node stopped", "err", err)
					return ucli.Exit("error: "+err.Error(), exitFailure)
				}
				return nil
			},
		}},
	}
}

func newLogger(w interface{ Write([]byte) (int, error) }, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, errBadFormat(format)
}

type errBadFormat string

func (e errBadFormat) Error() string {
	return "unknown --log-format " + string(e) + "; use text or json"
}
