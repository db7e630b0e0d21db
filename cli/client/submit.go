package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// maxSubmitResends bounds how often Submit sends a request again.
const maxSubmitResends = 3

// retryBackoffMS are the pauses before each resend.
var retryBackoffMS = []int{100, 300, 900}

// Submit submits a job, naming its module by hash first so a module the
// cluster already holds is not sent again; only if the cluster lacks it
// are the bytes sent. req.WasmModule must hold the module.
//
// A submission that carries an idempotency key is sent again, a few times
// with a short pause, when its outcome is unknown (code unknown_outcome, or
// unavailable: the node or the leader it forwarded to gave no answer). The
// cluster answers a resend with the job the first one created, so this is
// safe. Without a key an unknown outcome is returned to the caller, who must
// check before submitting again: a resend could run the job twice.
func (c *Client) Submit(ctx context.Context, req *palyrav1.SubmitJobRequest) (*palyrav1.SubmitJobResponse, error) {
	if err := checkSize(req); err != nil {
		return nil, err
	}
	resp, err := c.submitOnce(ctx, req)
	for try := 0; err != nil && req.IdempotencyKey != "" && try < maxSubmitResends && unknownOutcome(c.Explain(err).Code); try++ {
		t := time.NewTimer(time.Duration(retryBackoffMS[min(try, len(retryBackoffMS)-1)]) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		resp, err = c.submitOnce(ctx, req)
	}
	return resp, err
}

// unknownOutcome reports whether an error code leaves open whether the
// request took effect.
func unknownOutcome(code string) bool {
	return code == "unknown_outcome" || code == "unavailable"
}

// submitOnce sends req by hash, then by bytes if the cluster lacks the module.
func (c *Client) submitOnce(ctx context.Context, req *palyrav1.SubmitJobRequest) (*palyrav1.SubmitJobResponse, error) {
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
