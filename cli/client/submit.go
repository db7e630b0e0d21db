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
// are the bytes sent. A request without a module (a browser job) is sent
// as it is.
//
// A submission that carries an idempotency key is sent again (Resend)
// when its outcome is unknown (code unknown_outcome, or unavailable: the
// node or the leader it forwarded to gave no answer). The cluster answers
// a resend with the job the first one created, so this is safe. Without a
// key an unknown outcome is returned to the caller, who must check before
// submitting again: a resend could run the job twice. ('palyra job
// submit' always sends a key: the user's, or one it makes.)
func (c *Client) Submit(ctx context.Context, req *palyrav1.SubmitJobRequest) (*palyrav1.SubmitJobResponse, error) {
	if err := checkSize(req); err != nil {
		return nil, err
	}
	var resp *palyrav1.SubmitJobResponse
	send := func(ctx context.Context) (err error) {
		resp, err = c.submitOnce(ctx, req)
		return err
	}
	var err error
	if req.IdempotencyKey != "" {
		err = c.Resend(ctx, send)
	} else {
		err = send(ctx)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// submitOnce sends req by hash, then by bytes if the cluster lacks the module.
func (c *Client) submitOnce(ctx context.Context, req *palyrav1.SubmitJobRequest) (*palyrav1.SubmitJobResponse, error) {
	if len(req.WasmModule) == 0 {
		resp, err := c.Jobs.SubmitJob(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
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
