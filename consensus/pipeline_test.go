package consensus

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// The store replicates without raft's pipelining: with it, hashicorp/raft
// v1.7 can deadlock a follower's replication goroutine (a rejected append
// ends the pipeline's decoder while the sender is parked on its unbuffered
// in-flight channel), after which that follower never gets another entry
// and Shutdown waits forever. Seen as a 30-minute hang of an in-process
// cluster test on a loaded machine.
func TestReplicationIsNotPipelined(t *testing.T) {
	s := openStore(t, t.TempDir(), "n-1", true)
	defer s.Close()
	p, err := s.transport.AppendEntriesPipeline("n-2", "127.0.0.1:1")
	if p != nil {
		p.Close()
	}
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline = %v, want raft.ErrPipelineReplicationNotSupported (pipelining off)", err)
	}
}
