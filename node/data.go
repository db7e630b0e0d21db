package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/node/cluster"
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
	seq     *atomic.Uint64 // numbers this run's writes (nil: no job)
	run     uint64         // this run's nonce: the attempt may run again
}

// ForAttempt is the store as attempt of job sees it: its writes are
// refused once the attempt is superseded, and numbered, so that one sent
// again is applied once.
func (k nodeKV) ForAttempt(job string, attempt uint32) runtime.KV {
	var b [8]byte
	rand.Read(b[:])
	return nodeKV{n: k.n, job: job, attempt: attempt, seq: new(atomic.Uint64), run: binary.LittleEndian.Uint64(b[:]) | 1}
}

var _ runtime.KV = nodeKV{}

func (k nodeKV) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := k.retry(ctx, true, func() error { return k.n.cluster.VerifyRead(ctx) }); err != nil {
		return nil, false, err
	}
	v, ok := k.n.store.State().KV(key)
	return v, ok, nil
}

func (k nodeKV) Put(ctx context.Context, key string, val []byte) error {
	seq, run := k.next()
	cmd := &raftpb.Command{Cmd: &raftpb.Command_KvPut{KvPut: &raftpb.KVPut{Key: key, Value: val, JobId: k.job, Attempt: k.attempt, NodeId: k.n.ID(), Seq: seq, Run: run}}}
	return refused(k.retry(ctx, seq != 0, func() error { _, err := k.n.cluster.Apply(ctx, cmd); return err }))
}

// refused marks an error the store gave for good (invalid: a limit, the
// store full) as runtime.ErrRefused, so the guest is not told to retry.
func refused(err error) error {
	var ce *consensus.Error
	if errors.As(err, &ce) && ce.Code == consensus.ErrInvalid.Code {
		return fmt.Errorf("%w: %v", runtime.ErrRefused, err)
	}
	return err
}

func (k nodeKV) Delete(ctx context.Context, key string) error {
	seq, run := k.next()
	cmd := &raftpb.Command{Cmd: &raftpb.Command_KvDelete{KvDelete: &raftpb.KVDelete{Key: key, JobId: k.job, Attempt: k.attempt, NodeId: k.n.ID(), Seq: seq, Run: run}}}
	return k.retry(ctx, seq != 0, func() error { _, err := k.n.cluster.Apply(ctx, cmd); return err })
}

// next numbers the run's next write: (0, 0) without a job, and while a
// member this node knows runs software that would apply a numbered write
// again (it ignores the numbers: the replicas would differ).
func (k nodeKV) next() (seq, run uint64) {
	if k.seq == nil || !k.n.cluster.SeenSupport(cluster.FeatureKVRun) {
		return 0, 0
	}
	return k.seq.Add(1), k.run
}

// retry runs a job's key-value call until it succeeds, fails for good, or
// ctx (the host call's bound, within the job's time) ends. While there is no leader (an election takes about
// a second) and when the outcome of a write is unknown (the leader was
// lost under it), the call is made again: a read changes nothing, and a
// write carries its sequence number, so the FSM applies it once. Before,
// such a job failed for good (exit_code) on a leader's loss, and a write
// it was told had failed had been stored.
// A write without a number is not sent again after an unknown outcome.
func (k nodeKV) retry(ctx context.Context, numbered bool, call func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := call()
		if err == nil || k.seq == nil || !consensus.WorthRetrying(err, numbered) {
			return err
		}
		k.n.log.Warn("key-value call of a job waits for the control plane", "job", k.job, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (the control plane did not answer within the host call's time: %v)", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// sealSecret seals a value for the API's SetSecret.
func (n *Node) sealSecret(name string, value []byte) ([]byte, error) {
	if n.dataKey == nil {
		return nil, errors.New("this node has no cluster data key")
	}
	return seal(n.dataKey, name, value)
}
