package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/internal/testwasm"
)

// 'job submit' without --idempotency-key makes a key of its own, a new
// one each run, on each path (submit, submit --wait, which submits and
// follows in one call), so its resends of a lost answer are safe; the
// user's key is sent as given.
func TestJobSubmitMakesAnIdempotencyKey(t *testing.T) {
	c := startNode(t)
	wasm := testwasm.Path(t, "reverse")
	seen := map[string]bool{}
	for _, extra := range [][]string{{"--json"}, {"--json"}, {"--wait", "--json"}} {
		r := c.cli(append([]string{"job", "submit", "--wasm", wasm, "--input", "hi"}, extra...)...)
		var j jobJSON
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &j) != nil || j.ID == "" {
			t.Fatalf("job submit %v: %+v", extra, r)
		}
		if strings.Contains(r.stderr, "idempotency key matched") {
			t.Fatalf("job submit %v says a key matched, for a key it made: %q", extra, r.stderr)
		}
		key := c.jobJSON(j.ID).IdempotencyKey
		if !strings.HasPrefix(key, submitKeyPrefix) || len(key) < len(submitKeyPrefix)+20 || seen[key] {
			t.Fatalf("job submit %v: job %s has idempotency key %q; want a new random %s… key", extra, j.ID, key, submitKeyPrefix)
		}
		seen[key] = true
	}
	r := c.cli("job", "submit", "--wasm", wasm, "--input", "hi", "--idempotency-key", "mine", "--json")
	var j jobJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &j) != nil {
		t.Fatalf("job submit --idempotency-key mine: %+v", r)
	}
	if key := c.jobJSON(j.ID).IdempotencyKey; key != "mine" {
		t.Fatalf("job submit --idempotency-key mine stored key %q", key)
	}
}

// A write whose outcome stayed unknown after the resends is explained
// with what to do for the command at hand (the node's hint cannot know
// it): the key to submit again with, the key to read back. Other errors
// keep their own hint.
func TestUnknownOutcomeSaysWhatToDoForTheCommand(t *testing.T) {
	lost := &client.Error{Code: "unavailable", Hint: "check whether it took effect before doing it again",
		Message: "forwarded to leader n-1 at 127.0.0.1:7444 but got no reply (stream canceled); the command may or may not have committed"}
	for _, tc := range []struct {
		name string
		got  *client.Error
		want []string
	}{
		{"job submit", outcomeUnknown(lost, submitUnknownHint("cli-K1")), []string{"--idempotency-key cli-K1", "palyra job list"}},
		{"kv put", outcomeUnknown(lost, kvUnknownHint("write", "app/k")), []string{`palyra kv get "app/k"`, "before writing it again"}},
		{"kv delete, unknown_outcome", outcomeUnknown(&client.Error{Code: "unknown_outcome", Message: "m", Hint: "h"}, kvUnknownHint("delete", "k")),
			[]string{"the delete may or may not have taken effect", `palyra kv get "k"`}},
	} {
		if tc.got.Message == "" || tc.got.Message != lost.Message && tc.got.Message != "m" {
			t.Errorf("%s: message %q; want the node's", tc.name, tc.got.Message)
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.got.Hint, w) {
				t.Errorf("%s: hint %q lacks %q", tc.name, tc.got.Hint, w)
			}
		}
	}
	denied := &client.Error{Code: "permission_denied", Message: "no", Hint: "ask an operator"}
	if got := outcomeUnknown(denied, kvUnknownHint("write", "k")); got != denied {
		t.Errorf("a refusal was re-explained: %+v", got)
	}
}
