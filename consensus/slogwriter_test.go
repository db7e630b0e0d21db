package consensus

import "testing"

// A peer's clean stop ends raft's connections mid-read; the errors that
// causes are not errors. Anything else still is.
func TestExpectedRaftErrors(t *testing.T) {
	for msg, want := range map[string]bool{
		`failed to decode incoming command: error="EOF"`:                                                  true,
		`failed to decode incoming command: error="read: use of closed network connection"`:               true,
		`failed to decode incoming command: error="Application error 0x100 (remote): node shutting down"`: true,
		`failed to decode incoming command: error="unknown rpc type 9"`:                                   false,
		`failed to append entries: error="EOF"`:                                                           false,
	} {
		if got := expectedRaftError(msg); got != want {
			t.Errorf("%s: %v, want %v", msg, got, want)
		}
	}
}
