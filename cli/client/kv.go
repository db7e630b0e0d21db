package client

import (
	"context"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// PutKV sets a key to a value, sending the request again while its
// outcome is unknown (Resend): setting a key to the value it has is
// harmless. Each send that reaches the leader is a write of its own in the
// audit journal.
func (c *Client) PutKV(ctx context.Context, req *palyrav1.PutKVRequest) (*palyrav1.PutKVResponse, error) {
	var resp *connect.Response[palyrav1.PutKVResponse]
	err := c.Resend(ctx, func(ctx context.Context) (err error) {
		resp, err = c.KV.PutKV(ctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// DeleteKV deletes a key, sending the request again while its outcome is
// unknown (Resend): deleting a key twice is harmless. resent says that the
// answer is a resend's: its Existed is false when an earlier send, whose
// answer was lost, deleted the key.
func (c *Client) DeleteKV(ctx context.Context, req *palyrav1.DeleteKVRequest) (resp *palyrav1.DeleteKVResponse, resent bool, err error) {
	sends := 0
	err = c.Resend(ctx, func(ctx context.Context) error {
		sends++
		r, err := c.KV.DeleteKV(ctx, connect.NewRequest(req))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return nil, sends > 1, err
	}
	return resp, sends > 1, nil
}
