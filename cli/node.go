package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"strconv"

	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/identity/pairing"
	"github.com/palyra-mesh/palyra/proto/palyrav1"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/node/scheduler/driver"
)

func nodeFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "listen", Usage: "UDP `HOST:PORT` for QUIC (default: the address recorded in the data dir at the last start, so a restart keeps it; " + node.DefaultListen + " on a new data dir)", EnvVars: []string{"PALYRA_LISTEN"}},
		&ucli.StringFlag{Name: "advertise", Usage: "`HOST:PORT` other nodes dial (default: --listen; on a restart, the recorded one)", EnvVars: []string{"PALYRA_ADVERTISE"}},
		&ucli.StringSliceFlag{Name: "label", Usage: "node label `k=v` for scheduling and policy (repeatable)"},
		&ucli.IntFlag{Name: "wasm-slots", Usage: "wasm jobs run at once on this node", DefaultText: "2 × CPUs", EnvVars: []string{"PALYRA_WASM_SLOTS"}},
		&ucli.IntFlag{Name: "browser-slots", Usage: "browser jobs run at once, each slot with a Chromium of its own (-1 disables)", DefaultText: "2 when Chromium is installed", EnvVars: []string{"PALYRA_BROWSER_SLOTS"}},
		&ucli.BoolFlag{Name: "browser-prewarm", Usage: "keep a browser context per slot ready ahead of jobs (short browser jobs start ~45ms sooner; each ready context holds an idle loopback proxy that admits nothing until a job takes it)", EnvVars: []string{"PALYRA_BROWSER_PREWARM"}},
		&ucli.IntFlag{Name: "prefetch", Value: 4, Usage: "wasm jobs per slot a worker may hold waiting for a slot while jobs are short (under 250ms from placement to result on average; one per slot up to 1s, none for longer jobs, so a long job never waits behind a busy slot while another node has a free one), so short jobs do not wait for the next scheduling round (0: none; applies while this node leads)", EnvVars: []string{"PALYRA_PREFETCH"}},
		&ucli.IntFlag{Name: "array-prefetch", Value: 32, Usage: "the most job-array tasks per slot a worker may hold waiting: as many as about 100ms of work by the average run of the array's tasks, one before any of them has run (0: tasks take the --prefetch of single jobs; applies while this node leads)", EnvVars: []string{"PALYRA_ARRAY_PREFETCH"}},
		&ucli.Uint64Flag{Name: "max-ended-jobs", Value: driver.DefaultMaxEndedJobs, Usage: "the most ended jobs the cluster holds (array tasks included): past it the oldest are pruned before their retention, so memory stays bounded (about 2 KiB per job on each voter; at least 10000; applies while this node leads)", EnvVars: []string{"PALYRA_MAX_ENDED_JOBS"}},
		&ucli.DurationFlag{Name: "lease-ttl", Value: driver.DefaultLeaseTTL, Usage: "how long a placement lives without its worker renewing it (workers renew 3 times per TTL); a worker that is stuck, paused or cut off loses its jobs to the queue after this (applies while this node leads)", EnvVars: []string{"PALYRA_LEASE_TTL"}},
		&ucli.DurationFlag{Name: "host-call-timeout", Value: node.DefaultHostCallTimeout, Usage: "how long one host call of a wasm job on this node may take (an HTTP fetch, a secret or key-value read or write; 100ms to 1h) before it fails as timed out, which the job can handle; the job's own --timeout still applies", EnvVars: []string{"PALYRA_HOST_CALL_TIMEOUT"}},
		&ucli.DurationFlag{Name: "cert-ttl", Usage: "lifetime of the certificates this node signs while it is a voter (5s to 90 days); every node and device renews at two thirds of it", DefaultText: "24h", EnvVars: []string{"PALYRA_CERT_TTL"}},
		&ucli.StringFlag{Name: "network", Usage: "tune failure detection for `lan` (one site: a dead leader replaced in under a second) or wan (sites apart: slower, tolerant of slow links); default: the one recorded in the data dir, else lan", EnvVars: []string{"PALYRA_NETWORK"}},
		&ucli.IntFlag{Name: "target-voters", Usage: "raft voters the cluster keeps: 1, 3 or 5 (the leader's setting applies)", DefaultText: "3", EnvVars: []string{"PALYRA_TARGET_VOTERS"}},
		&ucli.StringFlag{Name: "metrics-listen", Usage: "serve Prometheus metrics over plain HTTP at http://`HOST:PORT`/metrics (loopback only unless --metrics-allow-remote; the API stays QUIC-only); remembered in the data dir, so a restart without it serves them again; 'off' (or \"\") stops serving and forgets it", DefaultText: "the address recorded in the data dir, else none", EnvVars: []string{"PALYRA_METRICS_LISTEN"}},
		&ucli.BoolFlag{Name: "metrics-allow-remote", Usage: "let --metrics-listen bind an address other hosts can reach (no authentication: firewall it); remembered with the address", EnvVars: []string{"PALYRA_METRICS_ALLOW_REMOTE"}},
		&ucli.StringFlag{Name: "log-format", Usage: "log format: text or json", Value: "text", EnvVars: []string{"PALYRA_LOG_FORMAT"}},
		&ucli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: "info", EnvVars: []string{"PALYRA_LOG_LEVEL"}},
	}
}

// parseLabels reads --label k=v items. A label outside palyrav1's label
// rule is kept (nodes labelled so before the rule existed must still
// start) with a warning.
func parseLabels(items []string) (out map[string]string, warnings []string, err error) {
	out = map[string]string{}
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return nil, nil, fmt.Errorf("label %q is not k=v", it)
		}
		if strings.HasPrefix(k, "palyra.") {
			return nil, nil, fmt.Errorf("label %q: the palyra. prefix is reserved", it)
		}
		if err := palyrav1.CheckText("label", it); err != nil {
			// Kept, as labels outside the rule are, so a node labelled so
			// before still starts (a joining node is refused it).
			warnings = append(warnings, fmt.Sprintf("%v: it is kept, and listings show it quoted", err))
			out[k] = v
			continue
		}
		if op := palyrav1.ComparisonIn(k, v); op != "" {
			return nil, nil, fmt.Errorf("label %q: a label is k=v, one '=' between a key and a value (not %s)", it, op)
		}
		if err := palyrav1.CheckLabel(k, v); err != nil {
			warnings = append(warnings, fmt.Sprintf("label %q: %v (%s): it is kept, but quote it in every --constraint that names it, and prefer such a label", it, err, palyrav1.LabelRule))
		}
		out[k] = v
	}
	return out, warnings, nil
}

// errConfigPrinted ends a command after --print-config.
var errConfigPrinted = errors.New("config printed")

// nodeConfig builds a node.Config from the node flags.
func nodeConfig(c *ucli.Context) (node.Config, error) {
	src, err := applyNodeSettings(c)
	if err != nil {
		return node.Config{}, err
	}
	logger, err := newLogger(c.App.ErrWriter, c.String("log-format"), c.String("log-level"))
	if err != nil {
		return node.Config{}, usageErr("%v", err)
	}
	labels, warnings, err := parseLabels(c.StringSlice("label"))
	if err != nil {
		return node.Config{}, usageErr("--label: %v", err)
	}
	for _, w := range warnings {
		fmt.Fprintln(c.App.ErrWriter, "warning: --label "+w)
	}
	tv := c.Int("target-voters")
	if tv != 0 && tv != 1 && tv != 3 && tv != 5 {
		return node.Config{}, usageErr("--target-voters must be 1, 3 or 5")
	}
	if ttl := c.Duration("cert-ttl"); ttl != 0 && (ttl < 5*time.Second || ttl > 90*24*time.Hour) {
		return node.Config{}, usageErr("--cert-ttl must be between 5s and 2160h (90 days)")
	}
	if d := c.Duration("host-call-timeout"); d < 100*time.Millisecond || d > time.Hour {
		return node.Config{}, usageErr("--host-call-timeout must be between 100ms and 1h (default %v)", node.DefaultHostCallTimeout)
	}
	if v := c.Int("wasm-slots"); v < 0 || v > maxSlots || (c.IsSet("wasm-slots") && v == 0) {
		return node.Config{}, usageErr("--wasm-slots %d: give 1 to %d wasm jobs at once (default 2 × CPUs)", v, maxSlots)
	}
	if v := c.Int("browser-slots"); v < -1 || v > maxSlots {
		return node.Config{}, usageErr("--browser-slots %d: give 1 to %d, or -1 to run no browser jobs on this node", v, maxSlots)
	}
	for _, name := range []string{"prefetch", "array-prefetch"} {
		if v := c.Int(name); v < 0 || v > maxPrefetch {
			return node.Config{}, usageErr("--%s %d: give 0 (none) to %d", name, v, maxPrefetch)
		}
	}
	if v := c.Uint64("max-ended-jobs"); v < minMaxEndedJobs || v > maxMaxEndedJobs {
		return node.Config{}, usageErr("--max-ended-jobs %d: give %d to %d (default %d)", v, minMaxEndedJobs, maxMaxEndedJobs, driver.DefaultMaxEndedJobs)
	}
	if d := c.Duration("lease-ttl"); d < time.Second || d > time.Hour {
		return node.Config{}, usageErr("--lease-ttl %v: give 1s to 1h (default %v); workers renew 3 times per TTL", d, driver.DefaultLeaseTTL)
	}
	if a := c.String("advertise"); a != "" {
		if err := checkAdvertise(a); err != nil {
			return node.Config{}, usageErr("--advertise: %v", err)
		}
	}
	network := strings.ToLower(c.String("network"))
	if _, err := node.TimersFor(network); err != nil {
		return node.Config{}, usageErr("--network: %v", err)
	}
	// --metrics-listen is remembered; off (or an explicit "") forgets it.
	metricsListen := c.String("metrics-listen")
	if strings.EqualFold(metricsListen, node.MetricsOff) || (metricsListen == "" && c.IsSet("metrics-listen")) {
		metricsListen = node.MetricsOff
		if s, ok := src["metrics-listen"]; ok {
			src["metrics-listen"] = setting{node.MetricsOff, s.source}
		}
	}
	dataDir := c.String("data-dir")
	if dataDir == "" {
		dataDir = "palyra-data"
	}
	cfg := node.Config{
		DataDir: dataDir, Listen: c.String("listen"), Advertise: c.String("advertise"),
		ClusterName: c.String("cluster-name"), Logger: logger, Version: nodeVersion(),
		WasmSlots: c.Int("wasm-slots"), BrowserSlots: c.Int("browser-slots"), BrowserPrewarm: c.Bool("browser-prewarm"), Labels: labels, TargetVoters: tv,
		Prefetch: prefetchFlag(c, "prefetch"), ArrayPrefetch: prefetchFlag(c, "array-prefetch"), LeaseTTL: c.Duration("lease-ttl"), MaxEndedJobs: c.Uint64("max-ended-jobs"),
		CertTTL: c.Duration("cert-ttl"), Network: network, HostCallTimeout: c.Duration("host-call-timeout"),
		MetricsListen: metricsListen, MetricsAllowRemote: c.Bool("metrics-allow-remote"),
	}
	if c.Bool("print-config") {
		if err := resolveDefaults(src, cfg); err != nil {
			return node.Config{}, fail(c, &client.Error{Code: "data_dir", Message: err.Error()})
		}
		if err := printConfig(c.App.Writer, src, c); err != nil {
			return node.Config{}, err
		}
		if err := node.CheckMetricsListen(cfg.MetricsListen, cfg.MetricsAllowRemote); err != nil {
			// What start refuses, said here too: print-config checks a
			// configuration before it is deployed.
			fmt.Fprintf(c.App.ErrWriter, "warning: 'node start' refuses this configuration: %v\n", err)
		}
		return node.Config{}, errConfigPrinted
	}
	return cfg, nil
}

// nodeGCPercent is the Go collector's GOGC for a node process when the
// environment sets none: the heap may grow to 3× the live data between
// collections instead of 2×, so the collector runs half as often. In
// back-to-back runs of 'go run ./internal/bench -single=false
// -cluster=false -history-only' the 16-submitter loop ran ~5% faster and
// the 100,000-task array ~10% faster than at 100; the ratio after 100,000
// jobs of history stayed 0.94–0.96× either way. The cost is a larger
// resident set while history is held (README, Benchmarks). GOGC and
// GOMEMLIMIT in the environment still apply as Go documents them.
const nodeGCPercent = 200

func runNode(c *ucli.Context, cfg node.Config) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(nodeGCPercent)
	}
	if err := servePprof(); err != nil {
		return ucli.Exit("error: "+err.Error(), exitFailure)
	}
	if err := node.Run(c.Context, cfg); err != nil {
		cfg.Logger.Error("node stopped", "err", err)
		return ucli.Exit("error: "+err.Error(), exitFailure)
	}
	return nil
}

func nodeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "node",
		Usage: "run, join and leave nodes",
		Subcommands: []*ucli.Command{
			{
				Name:  "start",
				Usage: "run a node in the foreground",
				Description: `The first start on an empty data dir creates a new cluster: its CA, this
   node's key and certificate, a single-voter Raft, and a local operator
   credential (data-dir/operator) for the CLI on this machine. Later starts
   resume from disk (a joined node rejoins by itself) on the address
   recorded in the data dir: restart with just 'palyra node start --data-dir D'.
   An explicit --listen moves the node; it logs the change and tells the
   cluster its new address. --network and --metrics-listen are remembered
   the same way (--metrics-listen off stops serving metrics); other flags
   (--target-voters, --wasm-slots, --cert-ttl, …) are not: give them on every
   start, or keep them in a --config file. SIGINT/SIGTERM stop it cleanly:
   a leader hands leadership over, and the node takes no more work and
   queues the jobs it was running again, to start at once on other nodes.

   Everything (API, Raft, gossip) is QUIC with mutual TLS on one UDP port.

   The node runs Go's collector at GOGC=200 unless GOGC is set; set
   GOMEMLIMIT (e.g. GOMEMLIMIT=2GiB) to cap the heap on a small machine.

   Settings: flags, then PALYRA_* variables, then --config FILE (TOML; its
   keys are these flags' long names plus data-dir and profile), then the
   profile, then defaults. --print-config shows the result and each
   setting's source. Profiles:
` + profileHelp() + `
   Example config (/etc/palyra/palyra.toml):
     profile = "worker-enabled"
     data-dir = "/var/lib/palyra"
     advertise = "10.0.0.2:7444"
     label = ["zone=a"]
     wasm-slots = 8`,
				Flags: append(append(nodeFlags(), configFlags()...), &ucli.StringFlag{Name: "cluster-name", Usage: "name of a new cluster (first start only)", Value: "palyra"}),
				Action: func(c *ucli.Context) error {
					cfg, err := nodeConfig(c)
					if errors.Is(err, errConfigPrinted) {
						return nil
					}
					if err != nil {
						return err
					}
					return runNode(c, cfg)
				},
			},
			{
				Name:  "join",
				Usage: "pair this machine as a new node of a cluster, then run it",
				Description: `Makes this node's key here (it never leaves), checks the node at --peer against
   the CA pinned in the code, exchanges the one-time code for a certificate,
   joins gossip and Raft, and runs in the foreground. Later, restart it with
   'palyra node start' on the same data dir.

   On an operator machine:  palyra pair create --kind node
   Here:                    palyra node join --code CODE --peer 10.0.0.1:7444 --listen 10.0.0.2:7444`,
				Flags: append(append(nodeFlags(), configFlags()...),
					&ucli.StringFlag{Name: "code", Required: true, Usage: "the code printed by 'palyra pair create --kind node'"},
					&ucli.StringFlag{Name: "peer", Required: true, Usage: "a node of the cluster, HOST:PORT"},
				),
				Action: nodeJoin,
			},
			nodeRecoverCommand(),
			{
				Name:      "drain",
				Usage:     "stop placing new work on a node; its running work finishes (or moves at --deadline), what waits there for a slot moves now",
				ArgsUsage: "NODE_ID",
				Flags:     []ucli.Flag{&ucli.DurationFlag{Name: "deadline", Usage: "move the node's remaining work elsewhere after this long", DefaultText: "none: its running work finishes"}, jsonFlag},
				Action: func(c *ucli.Context) error {
					if d := c.Duration("deadline"); d < 0 {
						return usageErr("--deadline must be positive, e.g. 10m (leave it out to let running work finish)")
					}
					return setSchedulable(c, &palyrav1.SetSchedulableRequest{Drain: true, DrainDeadlineMs: c.Duration("deadline").Milliseconds()})
				},
			},
			{
				Name:      "eligibility",
				Usage:     "allow or stop new work on a node (--enable also ends a drain)",
				ArgsUsage: "NODE_ID",
				Flags: []ucli.Flag{
					&ucli.BoolFlag{Name: "enable", Usage: "place new work on the node"},
					&ucli.BoolFlag{Name: "disable", Usage: "place no new work on the node; running work continues, what waits there for a slot moves elsewhere"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					if c.Bool("enable") == c.Bool("disable") {
						return usageErr("give exactly one of --enable or --disable")
					}
					return setSchedulable(c, &palyrav1.SetSchedulableRequest{Eligible: c.Bool("enable")})
				},
			},
			{
				Name:      "remove",
				Usage:     "take a node that is gone for good out of the cluster (raft, membership, its jobs re-queued)",
				ArgsUsage: "NODE_ID",
				Description: `For a node whose machine died or was retired without 'node leave'. The
   node is dropped from the raft configuration (autopilot promotes a spare if
   voters fall short), its certificate is revoked (every node refuses it; to
   bring that machine back, join it again with a new code and an empty data
   dir), and the jobs it was running are queued again to run elsewhere. The
   local operator credential made on its machine (when it created the
   cluster or paired) is revoked with it, since its key stays on that disk;
   if this very call uses that credential, it is kept and you are told to
   revoke it once you use another operator.

   A node that gossip still reports alive is refused: a running node should
   leave with 'palyra --addr ADDR node leave', which moves its work first.
   --force removes it anyway (it is cut off at once). The leader is always
   refused: stop it first, and remove it once another node leads. Every
   voter holds the cluster CA key; removing the last live node that holds
   it is refused without --force, since pairing and certificate renewal
   need it ('palyra ca status' lists the holders).

   Find the id with 'palyra nodes'. Needs the node.remove permission
   (operators have it by default).`,
				Flags: []ucli.Flag{
					&ucli.BoolFlag{Name: "force", Usage: "remove the node even though gossip reports it alive (it is cut off)"},
					jsonFlag,
				},
				Action: nodeRemove,
			},
			{
				Name:  "leave",
				Usage: "make the node at --addr leave the cluster gracefully (leadership handed off first), then stop",
				Description: `Asks exactly one node, the one at --addr (default: this data dir's node),
   to leave; it never fails over to another. From a paired device --addr is
   required: the device's recorded address is whichever node answered last.
   For a node that is gone already, use 'palyra node remove ID'.`,
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					cl, err := dialOne(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					// Which node this is, asked before it goes (it answers no
					// more once it has left); "" from a node that cannot say.
					id := ""
					if st, err := cl.Node.Status(c.Context, connect.NewRequest(&palyrav1.StatusRequest{})); err == nil {
						id = st.Msg.NodeId
					}
					if _, err := cl.Node.Leave(c.Context, connect.NewRequest(&palyrav1.LeaveRequest{})); err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						out := map[string]any{"address": cl.Addr, "left": true}
						if id != "" {
							out["id"] = id
						}
						return writeJSON(c.App.Writer, out)
					}
					if id != "" {
						fmt.Fprintf(c.App.Writer, "node %s at %s left the cluster\n", id, cl.Addr)
						return nil
					}
					fmt.Fprintf(c.App.Writer, "node at %s left the cluster\n", cl.Addr)
					return nil
				},
			},
		},
	}
}

func nodeJoin(c *ucli.Context) error {
	cfg, err := nodeConfig(c)
	if errors.Is(err, errConfigPrinted) {
		return nil
	}
	if err != nil {
		return err
	}
	code, err := pairing.Parse(c.String("code"))
	if err != nil {
		return fail(c, &client.Error{Code: "invalid_code", Message: err.Error(), Hint: "copy the code exactly as 'palyra pair create --kind node' printed it"})
	}
	if code.Kind() != identity.KindNode {
		return fail(c, &client.Error{Code: "invalid_code", Message: "this is a device code", Hint: "create a node code with 'palyra pair create --kind node'"})
	}
	if _, err := (node.Layout{Dir: cfg.DataDir}).ReadState(); err == nil {
		return fail(c, &client.Error{Code: "exists", Message: "data dir " + cfg.DataDir + " already holds a node",
			Hint: "start it with 'palyra node start', or join with another --data-dir"})
	}
	labels := cfg.Labels
	peer, err := peerFlag(c)
	if err != nil {
		return err
	}
	// The code works once: make sure this node can listen before it is
	// spent, so a busy port leaves the code, the cluster and the data dir
	// as they were.
	listen := cfg.Listen
	if listen == "" {
		listen = node.DefaultListen
	}
	if err := canListen(listen); err != nil {
		return fail(c, &client.Error{Code: "listen", Message: fmt.Sprintf("cannot listen on %s: %v", listen, err),
			Hint: "pick a free UDP port with --listen HOST:PORT; the code was not used"})
	}
	paired, err := client.PairMember(c.Context, peer, code, client.PairOptions{Labels: labels, LocalOperator: true})
	// A peer that is still starting refuses the handshake before anything
	// is sent (the code is not spent): wait for it a while, as the README's
	// three-node example starts the joins right after the first node.
	for deadline, said := time.Now().Add(joinStartingWait), false; client.NodeStarting(err) && time.Now().Before(deadline); {
		if !said {
			said = true
			fmt.Fprintf(c.App.ErrWriter, "the node at %s is starting; waiting for it to serve (up to %s)…\n", peer, joinStartingWait)
		}
		select {
		case <-c.Context.Done():
			return fail(c, explainPair(peer, err))
		case <-time.After(500 * time.Millisecond):
		}
		paired, err = client.PairMember(c.Context, peer, code, client.PairOptions{Labels: labels, LocalOperator: true})
	}
	if err != nil {
		return fail(c, explainPair(peer, err))
	}
	resp := paired.Response
	if paired.Operator != nil {
		if err := node.SaveLocalOperator(cfg.DataDir, paired.Operator); err != nil {
			return fail(c, &client.Error{Code: "internal", Message: err.Error()})
		}
	}
	seeds := append([]string{peer}, resp.Peers...)
	if err := node.PrepareJoin(cfg.DataDir, paired.Credential, resp.ClusterName, seeds, resp.DataKey); err != nil {
		return fail(c, &client.Error{Code: "internal", Message: err.Error()})
	}
	if paired.Operator != nil {
		cfg.Logger.Info("paired", "principal", resp.Principal, "cluster", resp.ClusterName,
			"local_operator", paired.Operator.Principal.String(), "cli", "palyra --data-dir "+cfg.DataDir+" nodes")
	} else {
		cfg.Logger.Info("paired", "principal", resp.Principal, "cluster", resp.ClusterName)
	}
	return runNode(c, cfg)
}

// joinStartingWait is how long node join waits for a peer that is still
// starting.
const joinStartingWait = time.Minute

// canListen reports whether a UDP socket can be bound on addr now (the
// node binds it again moments later; a port taken in between fails there).
func canListen(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		// net's error names the address again: keep the reason only.
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			return oe.Err
		}
		return err
	}
	return pc.Close()
}

func newLogger(w interface{ Write([]byte) (int, error) }, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
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

func setSchedulable(c *ucli.Context, req *palyrav1.SetSchedulableRequest) error {
	id, err := oneArg(c, "node id (see 'palyra nodes')")
	if err != nil {
		return err
	}
	req.NodeId = id
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := cl.Node.SetSchedulable(c.Context, connect.NewRequest(req)); err != nil {
		return fail(c, cl.Explain(err))
	}
	if c.Bool("json") {
		out := map[string]any{"node_id": id, "eligible": req.Eligible, "draining": req.Drain}
		if req.Drain && req.DrainDeadlineMs > 0 {
			out["drain_deadline"] = (time.Duration(req.DrainDeadlineMs) * time.Millisecond).String()
		}
		return writeJSON(c.App.Writer, out)
	}
	switch {
	case req.Drain && req.DrainDeadlineMs > 0:
		fmt.Fprintf(c.App.Writer, "node %s is draining: no new work; what waits there for a slot moves elsewhere now, what still runs there after %s moves elsewhere\n", id, time.Duration(req.DrainDeadlineMs)*time.Millisecond)
	case req.Drain:
		fmt.Fprintf(c.App.Writer, "node %s is draining: no new work; what waits there for a slot moves elsewhere now, what runs there finishes\n", id)
	case req.Eligible:
		fmt.Fprintf(c.App.Writer, "node %s is eligible for new work\n", id)
	default:
		fmt.Fprintf(c.App.Writer, "node %s takes no new work; what waits there for a slot moves elsewhere\n", id)
	}
	return nil
}

// prefetchFlag maps a prefetch flag to node.Config's convention (0 means
// the default there, negative none).
func prefetchFlag(c *ucli.Context, name string) int {
	if v := c.Int(name); v > 0 {
		return v
	}
	return -1
}

func nodeRemove(c *ucli.Context) error {
	id, err := oneArg(c, "node id (see 'palyra nodes')")
	if err != nil {
		return err
	}
	cl, err := dial(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := cl.Node.RemoveNode(c.Context, connect.NewRequest(&palyrav1.RemoveNodeRequest{NodeId: id, Force: c.Bool("force")}))
	if err != nil {
		return fail(c, cl.Explain(err))
	}
	r := resp.Msg
	if c.Bool("json") {
		requeued := r.Requeued
		if requeued == nil {
			requeued = []string{}
		}
		return writeJSON(c.App.Writer, map[string]any{"node_id": r.NodeId, "removed": true, "was_alive": r.WasAlive,
			"was_voter": r.WasVoter, "in_raft": r.InRaft, "requeued": requeued, "held_ca": r.HeldCa, "already_removed": r.AlreadyRemoved,
			"ca_holders": nonNil(r.CaHolders), "revoked_devices": nonNil(r.RevokedDevices), "kept_operator": r.KeptOperator})
	}
	w := c.App.Writer
	if r.AlreadyRemoved && len(r.RevokedDevices) == 0 && !r.InRaft && len(r.Requeued) == 0 {
		fmt.Fprintf(w, "node %s was removed already: nothing left to do\n", r.NodeId)
		return nil
	}
	fmt.Fprintf(w, "node %s removed: its certificate is revoked", r.NodeId)
	if r.InRaft {
		fmt.Fprintf(w, "; the leader is taking it out of raft")
	} else {
		fmt.Fprintf(w, " and it is out of raft")
	}
	fmt.Fprintf(w, "; %d running job(s) queued again\n", len(r.Requeued))
	if r.WasVoter {
		fmt.Fprintln(w, "it was a voter: a spare is promoted if the cluster has one ('palyra nodes')")
	}
	switch {
	case r.HeldCa && len(r.CaHolders) == 0:
		fmt.Fprintln(c.App.ErrWriter, "warning: it held the cluster CA and no other live node holds it: no node or device can pair, and certificates cannot be renewed, from now on")
	case r.HeldCa:
		fmt.Fprintf(w, "it held the cluster CA key; %s still hold it and sign ('palyra ca status')\n", strings.Join(r.CaHolders, ", "))
	}
	if r.HeldCa {
		// Revoking the node's certificate does not take the key off its
		// disk: with it, anyone can sign a certificate for any member.
		fmt.Fprintln(c.App.ErrWriter, "warning: its disk still holds the CA key, with which anyone can sign a certificate for any device or node of this cluster, an operator's included: unless that machine is wiped for certain, rotate the CA now ('palyra ca rotate'; the old root stays trusted for --overlap, then is dropped)")
	}
	if len(r.RevokedDevices) > 0 {
		fmt.Fprintf(w, "its local operator credential %s is revoked too\n", strings.Join(r.RevokedDevices, ", "))
	}
	if r.KeptOperator != "" {
		fmt.Fprintf(c.App.ErrWriter, "warning: this call used %s, the removed node's own local operator credential, so it is not revoked; use another operator and run 'palyra device revoke %s'\n", r.KeptOperator, r.KeptOperator)
	}
	return nil
}

// Bounds of node start's counts: past them a value is a slip, not a plan.
const (
	maxSlots        = 4096
	maxPrefetch     = 1024
	minMaxEndedJobs = 10_000
	maxMaxEndedJobs = 100_000_000
)

// checkAdvertise refuses an --advertise address no peer could dial,
// before anything is written to the data dir (a wildcard made a new
// cluster there, then failed to start).
func checkAdvertise(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT (e.g. 10.0.0.5:7444): %v", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", addr, port)
	}
	if host == "" {
		return fmt.Errorf("%q has no host: give the address other nodes dial, e.g. 10.0.0.5:7444", addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q is a wildcard: give the address other nodes dial, e.g. 10.0.0.5:7444", addr)
	}
	return nil
}
