package node

import (
	"context"
	"errors"

	"github.com/palyra-mesh/palyra/proto/raftpb"
	"github.com/palyra-mesh/palyra/runtime"
)

// nodeSecrets serves granted secrets to jobs from the replicated store.
type nodeSecrets struct{ n *Node }

var _ runtime.Secrets = nodeSecrets{}

func (s nodeSecrets) Get(ctx context.Context, name string) ([]byte, error) {
	if err := s.n.cluster.VerifyRead(ctx); err != nil {
		return nil, err
	}
	sec, ok := s.n.store.State().Secret(name)
	if !ok {
		return nil, runtime.ErrNotFound
	}
	return unseal(s.n.dataKey, name, sec.Sealed)
}

// nodeKV serves the granted key-value prefix from the replicated store:
// reads are linearizable, writes commit through Raft, fenced by the
// attempt of the job that writes (see ForAttempt).
type nodeKV struct {
	n       *Node
	job     string
	attempt uint32
}

// ForAttempt is the store as attempt of job sees it: its writes are
// refused once the attempt is superseded.
func (k nodeKV) ForAttempt(job string, attempt uint32) runtime.KV {
	return nodeKV{n: k.n, job: job, attempt: attempt}
}

var _ runtime.KV = nodeKV{}

func (k nodeKV) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := k.n.cluster.VerifyRead(ctx); err != nil {
		return nil, false, err
	}
	v, ok := k.n.store.State().KV(key)
	return v, ok, nil
}

func (k nodeKV) Put(ctx context.Context, key string, val []byte) error {
	_, err := k.n.cluster.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: key, Value: val, JobId: k.job, Attempt: k.attempt, NodeId: k.n.ID()}}})
	return err
}

func (k nodeKV) Delete(ctx context.Context, key string) error {
	_, err := k.n.cluster.Apply(ctx, &raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{Key: key, JobId: k.job, Attempt: k.attempt, NodeId: k.n.ID()}}})
	return err
}

// sealSecret seals a value for the API's SetSecret.
func (n *Node) sealSecret(name string, value []byte) ([]byte, error) {
	if n.dataKey == nil {
		return nil, errors.New("this node has no cluster data key")
	}
	return seal(n.dataKey, name, value)
}
