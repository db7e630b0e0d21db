package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func caCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "ca",
		Usage: "the cluster's certificate authority: its roots, who holds its key, rotation",
		Description: `Every voter holds the CA key and signs certificates, so pairing and renewal
   work through any node and survive the loss of any node. Non-voters and
   devices never get the key: they relay to a voter.`,
		Subcommands: []*ucli.Command{
			{
				Name:  "status",
				Usage: "show the trusted roots, which nodes hold their keys, which root each node's certificate comes from and when it expires",
				Flags: []ucli.Flag{jsonFlag},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Identity.GetCA(c.Context, connect.NewRequest(&palyrav1.GetCARequest{}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					if c.Bool("json") {
						nodes := []map[string]any{}
						for _, n := range resp.Msg.Nodes {
							nodes = append(nodes, map[string]any{"id": n.Id, "voter": n.Voter, "state": n.State,
								"holds": nonNil(n.Holds), "cert_root": n.CertRoot,
								"cert_expires": msTime(n.CertExpiresMs), "cert_renew_at": msTime(n.CertRenewAtMs)})
						}
						l := resp.Msg.GetLedger()
						return writeJSON(c.App.Writer, map[string]any{"roots": rootsJSON(resp.Msg.Roots), "rotating": resp.Msg.Rotating, "nodes": nodes,
							"certificate_ledger": map[string]any{"started": l.GetStarted(), "complete": l.GetComplete(),
								"since": msTime(l.GetSinceMs()), "certificates": l.GetCertificates(), "unrecorded_until": msTime(l.GetUnrecordedUntilMs())}})
					}
					printRoots(c, resp.Msg.Roots)
					if resp.Msg.Rotating {
						fmt.Fprintln(c.App.Writer, "a rotation is in progress: the new root becomes active once every live voter holds its key")
					}
					if l := resp.Msg.GetLedger(); l != nil {
						fmt.Fprintln(c.App.Writer, ledgerLine(l))
					}
					fmt.Fprintln(c.App.Writer)
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					fmt.Fprintln(tw, "NODE\tSTATE\tVOTER\tHOLDS KEYS OF\tCERTIFICATE FROM\tCERTIFICATE EXPIRES")
					now := time.Now()
					for _, n := range resp.Msg.Nodes {
						fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\n", n.Id, n.State, n.Voter, dash(strings.Join(n.Holds, ",")), dash(n.CertRoot), certExpiry(n.CertExpiresMs, now))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					for _, w := range certWarnings(resp.Msg.Nodes, now) {
						fmt.Fprintln(c.App.ErrWriter, w)
					}
					if silent := unannounced(resp.Msg.Nodes); len(silent) > 0 {
						fmt.Fprintf(c.App.ErrWriter, "%s announce no certificate expiry ('-'): a node runs an older palyra (see the VERSION column of 'palyra nodes') or has not been heard over gossip yet\n",
							strings.Join(silent, ", "))
					}
					for _, n := range resp.Msg.Nodes {
						if n.State == "removed" && len(n.Holds) > 0 {
							fmt.Fprintf(c.App.ErrWriter, "%s was removed ('palyra node remove') and signs nothing, but its data dir may still hold the CA key of %s, with which anyone can sign a certificate for any member: wipe that machine (delete its data dir), or rotate the CA ('palyra ca rotate')\n",
								n.Id, strings.Join(n.Holds, ","))
						}
					}
					return nil
				},
			},
			{
				Name:  "rotate",
				Usage: "replace the cluster's CA root with a new one, with no restart and no failed call",
				Description: `The leader makes a new root, cross-signed by the current one, and every voter
   fetches its key. Once every live voter holds it (a voter that is down is
   not waited for), it becomes the active root: every
   certificate is issued under it from then on, nodes renew onto it at once,
   and paired devices on their next palyra command. The old root stays trusted
   for --overlap, and is dropped after that once every live node has renewed.

   A device not used during the overlap must pair again, and so must a node
   that was down for all of it. The default overlap is the certificate
   lifetime, after which every certificate of the old root has expired
   anyway. Pairing codes made before the rotation work until the old root is
   dropped.

     palyra ca rotate
     palyra ca status      # follow it`,
				Flags: []ucli.Flag{
					&ucli.DurationFlag{Name: "overlap", Usage: "how long the old root stays trusted (5s to 90 days)", DefaultText: "the certificate lifetime"},
					jsonFlag,
				},
				Action: func(c *ucli.Context) error {
					cl, err := dial(c)
					if err != nil {
						return err
					}
					defer cl.Close()
					resp, err := cl.Identity.RotateCA(c.Context, connect.NewRequest(&palyrav1.RotateCARequest{OverlapMs: c.Duration("overlap").Milliseconds()}))
					if err != nil {
						return fail(c, cl.Explain(err))
					}
					m := resp.Msg
					if c.Bool("json") {
						return writeJSON(c.App.Writer, map[string]any{"old_root": m.OldFingerprint, "new_root": m.NewFingerprint,
							"activated": m.Activated, "old_root_retires_at": msTime(m.RetireAtMs), "roots": rootsJSON(m.Roots)})
					}
					if !m.Activated {
						fmt.Fprintf(c.App.Writer, "rotation requested; the new root becomes active once every live voter holds its key (follow with 'palyra ca status')\n")
						return nil
					}
					fmt.Fprintf(c.App.Writer, "new CA root %s is active; old root %s stays trusted until %s\n",
						short(m.NewFingerprint), short(m.OldFingerprint), msTime(m.RetireAtMs))
					fmt.Fprintln(c.App.ErrWriter, "nodes renew onto it now, paired devices on their next command; follow with 'palyra ca status'")
					return nil
				},
			},
		},
	}
}

func rootsJSON(roots []*palyrav1.CARoot) []map[string]any {
	out := []map[string]any{}
	for _, r := range roots {
		out = append(out, map[string]any{"fingerprint": r.Fingerprint, "state": r.State, "subject": r.Subject,
			"not_after": msTime(r.NotAfterMs), "added_at": msTime(r.AddedAtMs), "activated_at": msTime(r.ActivatedAtMs),
			"retire_at": msTime(r.RetireAtMs), "holders": nonNil(r.Holders)})
	}
	return out
}

func printRoots(c *ucli.Context, roots []*palyrav1.CARoot) {
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROOT\tSTATE\tSUBJECT\tEXPIRES\tRETIRES\tKEY HELD BY")
	now := time.Now()
	for _, r := range roots { // times as the nodes' certificates below show them
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", short(r.Fingerprint), r.State, r.Subject,
			certExpiry(r.NotAfterMs, now), certExpiry(r.RetireAtMs, now), dash(strings.Join(r.Holders, ",")))
	}
	tw.Flush()
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ledgerLine says what the certificate ledger holds and what it accepts.
func ledgerLine(l *palyrav1.CertLedgerStatus) string {
	if !l.Started {
		return "certificate ledger: not started yet (the leader starts it); every certificate the CA signs is accepted"
	}
	since := time.UnixMilli(l.SinceMs).UTC()
	if l.Complete {
		return fmt.Sprintf("certificate ledger: %d certificates recorded since %s; nodes accept no others (one signed with a copy of the CA key is refused)",
			l.Certificates, since.Format(time.RFC3339))
	}
	return fmt.Sprintf("certificate ledger: %d certificates recorded; nodes accept no others, except, until they expire (%s at the latest), certificates issued before %s to members registered before it and not renewed since (the ledger was restarted by a restore, a recovery or an upgrade)",
		l.Certificates, time.UnixMilli(l.UnrecordedUntilMs).UTC().Format(time.RFC3339), since.Format(time.RFC3339))
}

// certExpiry is when a node's certificate expires, with how long that is
// from now ("-" when the node does not say).
func certExpiry(ms int64, now time.Time) string {
	if ms == 0 {
		return "-"
	}
	t := time.UnixMilli(ms).UTC()
	if left := t.Sub(now); left > 0 {
		return fmt.Sprintf("%s (in %s)", t.Format("2006-01-02 15:04"), roughDuration(left))
	}
	return fmt.Sprintf("%s (EXPIRED %s ago)", t.Format("2006-01-02 15:04"), roughDuration(now.Sub(t)))
}

// roughDuration is d in its largest whole unit: 29d, 5h, 12m, 40s.
func roughDuration(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	case d >= time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	case d >= time.Minute:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return fmt.Sprintf("%ds", int(d/time.Second))
}

// unannounced names the nodes, neither removed nor dead (or stopped), that announce no
// certificate expiry: ca status shows '-' for them, and says why.
func unannounced(nodes []*palyrav1.CANode) []string {
	var out []string
	for _, n := range nodes {
		if n.CertExpiresMs == 0 && n.State != "removed" && n.State != "dead" && n.State != "stopped" {
			out = append(out, n.Id)
		}
	}
	return out
}

// certWarnings names the live nodes whose certificate is past its renewal
// time (a node renews two thirds into the lifetime; one that has not cannot
// reach a voter, or its clock is off) or has expired.
func certWarnings(nodes []*palyrav1.CANode, now time.Time) []string {
	var out []string
	for _, n := range nodes {
		if n.State == "removed" || n.State == "dead" || n.State == "stopped" || n.CertRenewAtMs == 0 {
			continue
		}
		exp, renew := time.UnixMilli(n.CertExpiresMs), time.UnixMilli(n.CertRenewAtMs)
		switch {
		case !now.Before(exp):
			out = append(out, fmt.Sprintf("%s's certificate expired at %s: its peers refuse it; remove it ('palyra node remove %s') and join that machine again with a new code ('palyra node join', a fresh data dir)",
				n.Id, exp.UTC().Format(time.RFC3339), n.Id))
		case now.Sub(renew) > time.Hour: // renewal is tried every few minutes from then
			out = append(out, fmt.Sprintf("%s should have renewed its certificate at %s and has not (it expires at %s): check that it reaches a voter ('palyra doctor' on it) and its log",
				n.Id, renew.UTC().Format(time.RFC3339), exp.UTC().Format(time.RFC3339)))
		}
	}
	return out
}
