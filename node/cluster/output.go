package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// OutputSource answers, on a worker, a read of a running job's output.
type OutputSource func(ctx context.Context, r *peerpb.JobOutputRequest) *peerpb.JobOutputResponse

// maxOutputWait bounds how long a JobOutput read waits for new bytes.
const maxOutputWait = 10 * time.Second

// SetOutputSource installs this node's worker output reader.
func (c *Cluster) SetOutputSource(f OutputSource) { c.outputs.Store(&f) }

func (c *Cluster) handleJobOutput(ctx context.Context, _ identity.Principal, r *peerpb.JobOutputRequest) *peerpb.Response {
	f := c.outputs.Load()
	if f == nil {
		return &peerpb.Response{Body: &peerpb.Response_JobOutput{JobOutput: &peerpb.JobOutputResponse{}}}
	}
	if w := time.Duration(r.WaitMs) * time.Millisecond; w > maxOutputWait {
		r.WaitMs = maxOutputWait.Milliseconds()
	}
	return &peerpb.Response{Body: &peerpb.Response_JobOutput{JobOutput: (*f)(ctx, r)}}
}

// JobOutput reads a running job's output from node (this node's own
// worker is read in place).
func (c *Cluster) JobOutput(ctx context.Context, node string, r *peerpb.JobOutputRequest) (*peerpb.JobOutputResponse, error) {
	if node == c.cfg.NodeID {
		f := c.outputs.Load()
		if f == nil {
			return &peerpb.JobOutputResponse{}, nil
		}
		return (*f)(ctx, r), nil
	}
	var addr string
	for _, m := range c.Members() {
		if m.ID == node {
			addr = m.Address
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("node %s is not a member this node knows", node)
	}
	wait := time.Duration(r.WaitMs)*time.Millisecond + 5*time.Second
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := c.call(ctx, addr, node, &peerpb.Request{Body: &peerpb.Request_JobOutput{JobOutput: r}})
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("%s: %s", resp.Error.Code, resp.Error.Message)
	}
	out := resp.GetJobOutput()
	if out == nil {
		return nil, fmt.Errorf("node %s answered an output read without output (an older version?)", node)
	}
	return out, nil
}
