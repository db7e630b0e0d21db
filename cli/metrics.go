package cli

import (
	"fmt"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func metricsCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "metrics",
		Usage: "print a node's Prometheus metrics (raft, jobs, queue, workers, certificates) through the API",
		Description: `The same text a node started with --metrics-listen serves at /metrics, fetched
   over the authenticated API from the node at --addr (operators only). With
   --json, {"node_id", "series": [{"name", "labels", "value"}, …]}; with --match,
   only series whose name contains the text. Like grep, a --match that
   matches no series exits 1 (saying so on stderr; with --json after
   printing an empty list), so scripts can tell; errors exit 1 too.

   Example:
     palyra metrics --match palyra_queue_depth`,
		Flags: []ucli.Flag{jsonFlag, &ucli.StringFlag{Name: "match", Usage: "only series whose name contains `TEXT` (none: exit 1)"}},
		Action: func(c *ucli.Context) error {
			cl, err := dial(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			resp, err := cl.Node.Metrics(c.Context, connect.NewRequest(&palyrav1.MetricsRequest{}))
			if err != nil {
				return fail(c, cl.Explain(err))
			}
			text, match := resp.Msg.Text, c.String("match")
			if !c.Bool("json") && match == "" {
				fmt.Fprint(c.App.Writer, text)
				return nil
			}
			p := expfmt.NewTextParser(model.UTF8Validation)
			families, err := p.TextToMetricFamilies(strings.NewReader(text))
			if err != nil {
				return fail(c, &client.Error{Code: "internal", Message: "the node's metrics do not parse: " + err.Error()})
			}
			type series struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels,omitempty"`
				Value  float64           `json:"value"`
			}
			out := []series{}
			names := make([]string, 0, len(families))
			for n := range families {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, name := range names {
				if match != "" && !strings.Contains(name, match) {
					continue
				}
				for _, m := range families[name].Metric {
					s := series{Name: name, Labels: map[string]string{}}
					for _, l := range m.Label {
						s.Labels[l.GetName()] = l.GetValue()
					}
					switch {
					case m.Gauge != nil:
						s.Value = m.Gauge.GetValue()
					case m.Counter != nil:
						s.Value = m.Counter.GetValue()
					case m.Untyped != nil:
						s.Value = m.Untyped.GetValue()
					case m.Histogram != nil:
						s.Name, s.Value = name+"_count", float64(m.Histogram.GetSampleCount())
					case m.Summary != nil:
						s.Name, s.Value = name+"_count", float64(m.Summary.GetSampleCount())
					}
					out = append(out, s)
				}
			}
			if c.Bool("json") {
				if err := writeJSON(c.App.Writer, map[string]any{"node_id": resp.Msg.NodeId, "series": out}); err != nil || len(out) > 0 || match == "" {
					return err
				}
				return ucli.Exit("", exitFailure)
			}
			if len(out) == 0 && match != "" {
				fmt.Fprintf(c.App.ErrWriter, "no metric name contains %q on node %s (see the names with 'palyra metrics')\n", match, resp.Msg.NodeId)
				return ucli.Exit("", exitFailure)
			}
			for _, s := range out {
				var ls []string
				for k, v := range s.Labels {
					ls = append(ls, fmt.Sprintf("%s=%q", k, v))
				}
				sort.Strings(ls)
				lbl := ""
				if len(ls) > 0 {
					lbl = "{" + strings.Join(ls, ",") + "}"
				}
				fmt.Fprintf(c.App.Writer, "%s%s %g\n", s.Name, lbl, s.Value)
			}
			return nil
		},
	}
}
