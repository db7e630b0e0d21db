package client

import (
	"context"
	"time"
)

// maxResends bounds how often Resend sends a call again.
const maxResends = 3

// retryBackoffMS are the pauses before each resend: 1.3 s in all, enough
// to ride out a leader change (about a second).
var retryBackoffMS = []int{100, 300, 900}

// Resend makes a write that is safe to repeat and, while its outcome is
// unknown (OutcomeUnknown: code unknown_outcome, or unavailable, when the
// node or the leader it forwarded to gave no answer, mostly a leader
// change under way), makes it again, up to maxResends times after a short
// pause. It returns send's last error, or ctx's when ctx ends during a
// pause. Use it only where a second time is harmless: a submission with an
// idempotency key (the cluster answers it with the first one's job). Not
// a write the cluster cannot recognise a second time (an operator's
// key-value put: another writer's value in between would be undone).
func (c *Client) Resend(ctx context.Context, send func(context.Context) error) error {
	err := send(ctx)
	for try := 0; err != nil && try < maxResends && OutcomeUnknown(c.Explain(err).Code); try++ {
		t := time.NewTimer(time.Duration(retryBackoffMS[min(try, len(retryBackoffMS)-1)]) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = send(ctx)
	}
	return err
}

// OutcomeUnknown reports whether an error code leaves open whether a
// write took effect.
func OutcomeUnknown(code string) bool {
	return code == "unknown_outcome" || code == "unavailable"
}
