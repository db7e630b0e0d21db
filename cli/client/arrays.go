package client

import (
	"context"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// ArrayTasks calls fn with every task of array id, in task order, outputs
// included, paging through ListJobs (a page holds up to 1000 tasks or a
// few MiB of outputs). It stops at the first error fn returns.
func (c *Client) ArrayTasks(ctx context.Context, id string, stale bool, fn func(*palyrav1.Job) error) error {
	after := ""
	for {
		resp, err := c.Jobs.ListJobs(ctx, connect.NewRequest(&palyrav1.ListJobsRequest{
			ArrayId: id, WithOutputs: true, Limit: 1000, AfterId: after, Stale: stale}))
		if err != nil {
			return err
		}
		for _, j := range resp.Msg.Jobs {
			if err := fn(j); err != nil {
				return err
			}
		}
		if resp.Msg.NextAfterId == "" {
			return nil
		}
		after = resp.Msg.NextAfterId
	}
}
