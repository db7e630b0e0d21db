package cli

import (
	"crypto/rand"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/cli/client"
)

// submitKeyPrefix starts the idempotency keys 'job submit' makes, so 'job
// get' shows which keys a person chose.
const submitKeyPrefix = "cli-"

// submitKey is the idempotency key of this 'job submit': the user's
// --idempotency-key, or else a random one made for this run (128 bits;
// the cluster scopes keys to their submitter and keeps each while its job
// is kept). With it the client sends a submission whose answer was lost
// again (a leader change, a node stopping), and the cluster answers with
// the job the first one made: nothing is submitted twice.
func submitKey(c *ucli.Context) string {
	if k := c.String("idempotency-key"); k != "" {
		return k
	}
	return submitKeyPrefix + rand.Text()
}

// outcomeUnknown explains a write that failed with its outcome unknown
// (client.OutcomeUnknown) after the client's resends: it keeps e's
// message and gives hint, what to do for the command at hand, in place of
// the node's, which cannot know the command. Any other error is e.
func outcomeUnknown(e *client.Error, hint string) *client.Error {
	if e == nil || !client.OutcomeUnknown(e.Code) {
		return e
	}
	return &client.Error{Code: e.Code, Message: e.Message, Hint: hint}
}

// submitUnknownHint says what to do about a submission with key whose
// outcome stayed unknown.
func submitUnknownHint(key string) string {
	return fmt.Sprintf("the job may or may not have been accepted: run the same command again with --idempotency-key %s added "+
		"(it returns the job if the first submission got through, and submits it if not), or look for it with 'palyra job list'", key)
}

// kvUnknownHint says what to do about a write of key ("set" or "delete")
// whose outcome stayed unknown.
func kvUnknownHint(verb, key string) string {
	return fmt.Sprintf("the %s may or may not have taken effect: read the key with 'palyra kv get %q' before writing it again "+
		"(another writer may have changed it since)", verb, key)
}
