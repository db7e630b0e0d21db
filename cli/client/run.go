package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// Run submits one wasm job and follows it to its end in one call (the
// RunJob RPC), naming the module by hash first as Submit does. accepted,
// when set, is called with the job once the cluster has accepted it. If
// the stream breaks after that (the node restarted, was killed or went
// silent), Run follows the job with WatchJob, as a Follower, until ctx
// ends. It returns the ended job, whatever its phase; an error means the
// job's end was not seen.
//
// A request with an idempotency key whose acceptance is unknown (the call
// failed before the job was named: code unknown_outcome or unavailable)
// is sent again as Submit does (Resend); the cluster answers a resend with
// the job the first one created, and Run follows that.
func (c *Client) Run(ctx context.Context, req *palyrav1.SubmitJobRequest, update func(*palyrav1.Job)) (*palyrav1.Job, error) {
	if err := checkSize(req); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(req.WasmModule)
	byHash := proto.Clone(req).(*palyrav1.SubmitJobRequest)
	byHash.WasmModule, byHash.ModuleSha256 = nil, hex.EncodeToString(sum[:])
	f := c.Follow("")
	defer f.Close()
	var job *palyrav1.Job
	var id string
	var err error
	send := func(ctx context.Context) error {
		job, id, err = c.runOnce(ctx, byHash, update)
		if err != nil && id == "" && c.Explain(err).Code == "module_not_found" {
			job, id, err = c.runOnce(ctx, req, update)
		}
		if id != "" {
			return nil // accepted: a broken stream is followed below, not sent again
		}
		return err
	}
	if req.IdempotencyKey != "" {
		c.Resend(ctx, send) // leaves job, id and err as the last send did
	} else {
		send(ctx)
	}
	if err == nil || id == "" {
		return job, err
	}
	f.what = id
	return c.followJob(ctx, f, id, err, update)
}

// runOnce sends one RunJob and reads it to the end. id is set once the
// job was accepted.
func (c *Client) runOnce(ctx context.Context, req *palyrav1.SubmitJobRequest, update func(*palyrav1.Job)) (job *palyrav1.Job, id string, err error) {
	stream, err := c.Jobs.RunJob(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, "", err
	}
	defer stream.Close()
	for stream.Receive() {
		j := stream.Msg().Job
		id = j.Id
		if update != nil {
			update(j)
		}
		if j.Phase.Terminal() {
			return j, id, nil
		}
	}
	if err = stream.Err(); err == nil {
		err = errors.New("the node ended the stream before the job ended")
	}
	return nil, id, err
}

// followJob watches job id, whose stream broke with err, until it ends,
// riding out a node that restarts, goes silent or loses its leader, until
// ctx ends.
func (c *Client) followJob(ctx context.Context, f *Follower, id string, err error, update func(*palyrav1.Job)) (*palyrav1.Job, error) {
	for {
		if !f.Broke(ctx, err) {
			return nil, fmt.Errorf("job %s accepted, but its end was not seen: %w (last error: %v)", id, ctx.Err(), err)
		}
		var stream *connect.ServerStreamForClient[palyrav1.WatchJobResponse]
		stream, err = c.Jobs.WatchJob(ctx, connect.NewRequest(&palyrav1.WatchJobRequest{Id: id}))
		if err == nil {
			for stream.Receive() {
				f.Delivered()
				j := stream.Msg().Job
				if update != nil {
					update(j)
				}
				if j.Phase.Terminal() {
					stream.Close()
					return j, nil
				}
			}
			if err = stream.Err(); err == nil {
				err = errors.New("the node ended the stream before the job ended")
			}
			stream.Close()
		}
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeNotFound {
			return nil, err
		}
	}
}
