package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// Submit submits a job, naming its module by hash first so a module the
// cluster already holds is not sent again; only if the cluster lacks it
// are the bytes sent. req.WasmModule must hold the module.
func (c *Client) Submit(ctx context.Context, req *palyrav1.SubmitJobRequest) (*palyrav1.SubmitJobResponse, error) {
	sum := sha256.Sum256(req.WasmModule)
	byHash := proto.Clone(req).(*palyrav1.SubmitJobRequest)
	byHash.WasmModule, byHash.ModuleSha256 = nil, hex.EncodeToString(sum[:])
	resp, err := c.Jobs.SubmitJob(ctx, connect.NewRequest(byHash))
	if err == nil {
		return resp.Msg, nil
	}
	if e := c.Explain(err); e.Code != "module_not_found" {
		return nil, err
	}
	resp, err = c.Jobs.SubmitJob(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}
